"""Claim rounds on a FakeClock: a confirmed claim's round is closed in the write that
opens the next round, or on its own within `CLOSE_WITHIN_MS` (daemon/rounds.py)."""

from __future__ import annotations

from daemon.publisher import ClaimTokens
from daemon.rounds import CLOSE_WITHIN_MS, Rounds
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import RecordingStore, recording

FENCE = 1


def rounds_of(store: RecordingStore, clock: FakeClock) -> Rounds:
    return Rounds(store.rounds, ClaimTokens("d1"), clock, Metrics(), max_spare_age_ms=30_000)


def open_rounds(store: MemoryStore) -> set[str]:
    return set(store.state.rounds)


async def confirmed_round(rounds: Rounds) -> str:
    """A round opened, claimed under and confirmed: its token."""
    token = await rounds.take(FENCE)
    rounds.confirmed([token])
    return token


async def test_a_confirmed_round_closes_in_the_write_that_opens_the_next(
    store: MemoryStore, clock: FakeClock
) -> None:
    counted = recording(store)
    rounds = rounds_of(counted, clock)
    await confirmed_round(rounds)
    second = await rounds.take(FENCE)
    assert open_rounds(store) == {second}
    assert counted.ops == {"open_round": 2}, "the close rode on the second open"
    await rounds.stop()


async def test_a_confirmed_round_closes_on_its_own_when_no_round_opens(
    store: MemoryStore, clock: FakeClock
) -> None:
    rounds = rounds_of(recording(store), clock)
    first = await confirmed_round(rounds)
    await clock.run_for(CLOSE_WITHIN_MS - 1)
    assert open_rounds(store) == {first}
    await clock.run_for(1)
    assert open_rounds(store) == set()
    await rounds.stop()


async def test_stop_closes_what_is_confirmed(store: MemoryStore, clock: FakeClock) -> None:
    rounds = rounds_of(recording(store), clock)
    await confirmed_round(rounds)
    await rounds.stop()
    assert open_rounds(store) == set()


async def test_a_failed_open_keeps_its_closes_for_the_next(
    store: MemoryStore, clock: FakeClock
) -> None:
    rounds = rounds_of(recording(store), clock)
    first = await confirmed_round(rounds)
    real = store.rounds.open_round

    async def failing(*args: object, **kwargs: object) -> None:
        raise ConnectionError("store away")

    store.rounds.open_round = failing  # type: ignore[method-assign]
    await rounds.prepare(FENCE)  # logged and counted; no spare
    store.rounds.open_round = real  # type: ignore[method-assign]
    assert open_rounds(store) == {first}
    second = await rounds.take(FENCE)
    assert open_rounds(store) == {second}
    await rounds.stop()


async def test_a_short_reconcile_wait_closes_rounds_sooner(
    store: MemoryStore, clock: FakeClock
) -> None:
    # Reconciling after 800 ms (spares live 400 ms): a round confirmed but left open
    # for a second would look unpublished to the reconciler.
    rounds = Rounds(store.rounds, ClaimTokens("d1"), clock, Metrics(), max_spare_age_ms=400)
    await confirmed_round(rounds)
    await clock.run_for(100)
    assert open_rounds(store) == set()
    await rounds.stop()
