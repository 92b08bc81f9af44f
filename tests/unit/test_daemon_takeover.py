"""A takeover resumes the catch-up from the persisted pointer, not from second 0, finds
a second written below that pointer just before the old leader stopped, and costs a
bounded number of store calls (daemon/scanner.py, `_take_over` and `_resume`)."""

from __future__ import annotations

from typing import Any

from tests.unit.daemon_harness import Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.model import second_of
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import RecordingStore

START = 1_767_225_600_000
CATCH_UP_LIMIT = 1  # the catch-up asks the index for one second at a time


def spy_next_seconds(store: Any) -> list[tuple[int, int, int]]:
    """Every (from, to, limit) the daemon asks the seconds index."""
    real = store.scan.next_seconds
    asked: list[tuple[int, int, int]] = []

    async def next_seconds(lo: int, hi: int, limit: int) -> Any:
        asked.append((lo, hi, limit))
        return await real(lo, hi, limit)

    store.scan.next_seconds = next_seconds
    return asked


async def test_the_new_leader_resumes_from_the_pointer_and_finds_what_lies_below_it() -> None:
    store, clock = MemoryStore(buckets=60), FakeClock(START)
    old = Harness(store, clock, watch=False)
    await create(store, START, *((f"early-{n}", START + 2000 + n * 100) for n in range(10)))
    await run_until(START + 20_000, old)
    assert len(old.queue.at) == 10, f"expected 10 published, got {len(old.queue.at)}"
    pointer = (await store.pointers.load_pointers(["p0"])).get("p0")
    assert pointer is not None and pointer >= second_of(START + 19_000), (
        f"expected the old leader's pointer near {second_of(START + 20_000)}, got {pointer}"
    )
    await old.daemon.lease.release()
    # Written below the pointer while nobody leads (the API's nudge went nowhere).
    straggler_due = START + 5000
    await create(store, START + 20_000, ("straggler", straggler_due))

    recorded = RecordingStore(store)
    asked = spy_next_seconds(recorded)
    new = Harness(recorded, clock, watch=False)  # type: ignore[arg-type]
    took_over_ms = clock.now_ms()
    await run_until(took_over_ms + 1000, new)

    catch_up = [lo for lo, _, limit in asked if limit == CATCH_UP_LIMIT]
    assert catch_up and catch_up[0] == pointer, (
        f"expected the catch-up to start at the pointer {pointer}, got {catch_up[:3]}"
    )
    assert 0 not in catch_up, f"expected no catch-up walk from second 0, got {catch_up[:5]}"
    published = new.queue.times("straggler")
    assert published and published[0] - took_over_ms <= 500, (
        f"expected the straggler below the pointer published within 500 ms of the"
        f" takeover, got {published}"
    )
    # The takeover round's store work: a handful of calls, whatever the history.
    calls = sum(recorded.ops.values())
    assert calls <= 30, f"expected a bounded takeover (<= 30 store calls), got {recorded.ops}"


async def test_a_first_leader_with_no_pointer_walks_from_the_start() -> None:
    store, clock = MemoryStore(buckets=60), FakeClock(START)
    await create(store, START - 3_600_000, ("old", START - 3_600_000))  # due an hour ago
    h = Harness(store, clock, watch=False)
    await run_until(START + 1000, h)
    assert h.queue.times("old"), "expected the hour-old job published by a first leader"
