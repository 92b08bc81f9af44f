"""The scanner's coalescing window (daemon/scan_state.py, `ClaimPace`): alone, and in
the daemon driven by hand (FakeClock + MemoryStore, no sleeping)."""

from __future__ import annotations

from collections import Counter

from daemon.scan_state import COALESCE_JOBS, COALESCE_MS, ClaimPace
from tests.unit.daemon_harness import CLAIM_AHEAD_MS, Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.store.memory import MemoryStore


def test_the_window_is_whole_while_claims_are_few() -> None:
    pace = ClaimPace(500)
    assert pace.window_ms(0) == 500
    pace.claimed(0, 12)  # 12 jobs/s: 64 of them take longer than the window
    assert pace.window_ms(100) == 500


def test_the_window_holds_about_a_claims_worth_at_the_last_seconds_rate() -> None:
    pace = ClaimPace(500)
    for t in range(0, 1000, 100):
        pace.claimed(t, 50)  # 500 jobs/s
    assert pace.window_ms(999) == COALESCE_JOBS * 1000 // 500  # 128 ms


def test_a_burst_is_forgotten_after_a_second() -> None:
    pace = ClaimPace(500)
    pace.claimed(0, 100_000)  # a herd
    assert pace.window_ms(10) == 0
    assert pace.window_ms(1000) == 500
    pace.claimed(1000, 0)  # nothing claimed counts for nothing
    assert pace.window_ms(1001) == 500


async def flow(
    store: MemoryStore, clock: FakeClock, jobs: int, apart_ms: int, run_ms: int
) -> tuple[Harness, dict[str, int], int]:
    """`jobs` due `apart_ms` apart from 3 s on, the daemon run for `run_ms`."""
    h = Harness(store, clock)
    start = clock.now_ms()
    due = {f"f{i}": start + 3000 + apart_ms * i for i in range(jobs)}
    await create(store, start, *due.items())
    await run_until(start + run_ms, h, max_step_ms=10)
    return h, due, start


async def test_a_trickle_is_claimed_a_window_at_a_time_not_one_job_at_a_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    # 25 jobs/s for 10 s, 40 ms apart: every wheel timer its own moment.
    h, due, _ = await flow(store, clock, jobs=250, apart_ms=40, run_ms=15_000)

    for job_id, due_at in due.items():
        times = h.queue.times(job_id)
        assert len(times) == 1, f"{job_id}: expected one publish, got {times}"
        assert 0 <= due_at - times[0] <= CLAIM_AHEAD_MS + COALESCE_MS, (job_id, times)
    # One claim per coalescing window (and one more where a second begins), not 250.
    windows = 10_000 // COALESCE_MS + 10
    assert store.ops["claim_due"] <= windows, store.ops


async def test_a_steady_flow_is_claimed_in_small_groups_not_whole_windows(
    store: MemoryStore, clock: FakeClock
) -> None:
    # 500 jobs/s: a 500 ms window would hand the broker 250 messages at once.
    h, _, start = await flow(store, clock, jobs=2000, apart_ms=2, run_ms=8000)

    groups = Counter(t for t, _ in h.queue.at)
    assert sum(groups.values()) == 2000
    settled = [n for t, n in sorted(groups.items()) if t >= start + 3000]  # after 1 s of flow
    # About COALESCE_JOBS (64) per claim once the rate is known; 250 with whole windows.
    assert settled and max(settled) <= 160, sorted(groups.values())[-10:]
