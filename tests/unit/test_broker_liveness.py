"""A live broker never looks dead because the store is slow.

The leader resends the callbacks a dead broker had started (daemon/reconciler.py):
judged dead while alive, a broker's callback would go out twice with no process
dead, which the contract forbids. A beat's expiry was stamped on the broker's clock
when it was sent and judged on the daemon's when the read came back, so every wait
in the store counted against the broker, and the next beat started 2 s after the
last one's answer: with the store's answers 4 s slow the live broker looked dead 2 s
in every 6 (the first case below). On SecantusDB saturated at 200 jobs/s here,
the stalest a beat looked was 2.7 s of the 8 allowed (`bench/roundtrips_bench.py`,
beats logged): a margin a slower store eats. Now the store stamps the expiry when
the beat lands, the reader judges it on the store's clock when the read applied,
and beats start 2 s apart whatever each takes.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from daemon.holders import judge
from tests.unit.broker_harness import world_with
from timer_service.clock import FakeClock
from timer_service.model import JobState
from timer_service.store.memory import MemoryStore

RUN_MS = 40_000


def slow_store(store: MemoryStore, clock: FakeClock, beat_s: float, read_s: float) -> list[int]:
    """Heartbeats wait `beat_s` in the store before they apply; reads of them apply at
    once and answer `read_s` later. The list: when each beat landed (store's clock)."""
    landed: list[int] = []
    brokers: Any = store.brokers
    beat, beats = brokers.broker_heartbeat, brokers.broker_beats

    async def slow_beat(*args: Any, **kwargs: Any) -> int:
        await clock.sleep(beat_s)
        landed.append(clock.now_ms())
        result: int = await beat(*args, **kwargs)
        return result

    async def slow_read() -> Any:
        result = await beats()
        await clock.sleep(read_s)
        return result

    brokers.broker_heartbeat, brokers.broker_beats = slow_beat, slow_read
    return landed


@pytest.mark.parametrize(
    ("beat_s", "read_s"),
    [
        (4.0, 2.0),  # the store's waits counted against the broker: dead 2 s in 6
        (7.0, 0.0),  # a beat started 2 s after the last one's answer: 9 s apart
    ],
)
async def test_a_broker_whose_store_is_slow_never_looks_dead(beat_s: float, read_s: float) -> None:
    clock = FakeClock(max_step_ms=10)
    store = MemoryStore(buckets=60, clock=clock)
    landed = slow_store(store, clock, beat_s, read_s)
    async with world_with(store, clock=clock) as w:
        await clock.drive(w.broker.start())
        looked_dead: list[int] = []

        async def leader() -> None:
            """The reconciler's look at the heartbeats, every half second."""
            while True:
                holders = judge(await store.brokers.broker_beats(), clock.now_ms())
                if "b1" not in holders.live:
                    looked_dead.append(clock.now_ms())
                await clock.sleep(0.5)

        looking = clock.drive(leader(), within_ms=RUN_MS)
        with pytest.raises(TimeoutError):
            await looking
    # From the loop's first beat on (start-up's own beat is followed by a first look
    # at the biz types, which a slow store makes slow too).
    gaps = [b - a for a, b in itertools.pairwise(landed[1:])]
    print(f"beats landed {len(landed)} times, then at most {max(gaps)} ms apart")
    assert len(landed) >= RUN_MS // round(beat_s * 1000) - 1, landed
    assert max(gaps) <= max(2000, beat_s * 1000) + 50, f"beats landed {gaps} ms apart"
    assert looked_dead == [], f"the live broker looked dead at {looked_dead[:5]}"


async def test_a_stopping_broker_beats_until_its_callbacks_are_done() -> None:
    # A graceful stop waits for the callbacks in flight and their outcomes (up to the
    # grace period). It stopped beating first: a callback answering in 9 s made the
    # stopping broker look dead, and the leader would resend that callback while the
    # broker was still finishing it (a second callback from a slow endpoint).
    clock = FakeClock(max_step_ms=10)
    store = MemoryStore(buckets=60, clock=clock)
    async with world_with(store, clock=clock, shutdown_grace_s=15) as w:
        w.receiver.responder = lambda _: (200, {}, 9.0)
        await w.put_biz("orders")
        await clock.drive(w.broker.start())
        due = clock.now_ms() + 100
        await w.create("orders", ["j"], due)
        w.daemon.watch([due])
        await clock.drive(w.daemon.dispatch_once())
        assert await clock.run_until(lambda: len(w.receiver.received) == 1, 5000)
        stopping = asyncio.ensure_future(w.broker.stop())
        looked_dead: list[int] = []
        while not stopping.done():
            if "b1" in judge(await store.brokers.broker_beats(), clock.now_ms()).dead:
                looked_dead.append(clock.now_ms())
            await clock.run_for(500)
        await stopping
        job = await store.jobs.get_job("orders", "j")
    assert job is not None and job.state is JobState.DELIVERED, job
    assert looked_dead == [], f"the stopping broker looked dead at {looked_dead[:3]}"
