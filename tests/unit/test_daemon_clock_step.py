"""The scanner across a host clock step back: its wheel follows the clock."""

from __future__ import annotations

from tests.unit.daemon_harness import CLAIM_AHEAD_MS, Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.store.memory import MemoryStore


async def test_a_job_loaded_after_the_clock_steps_back_is_claimed_on_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Seed 1157 of the simulation (issue 30): daemon-1's clock stepped back 1,321 ms,
    then a retry wrote a job into a second it loaded. The wheel stayed at the time
    before the step and fired the job's timer at once; the claim, bounded by the
    clock's now, did not reach the job, and the fired timer was kept as still to
    claim: the second was held for ever, never claimed nor released, and the overdue
    sweep passed it over as the scanner's. A step back now files the wheel anew."""
    h = Harness(store, clock)
    start = clock.now_ms()
    clock.set(start + 1900)
    await h.step()  # the wheel is at +1.9 s
    clock.set(start + 600)  # the host clock steps back 1.3 s
    due = start + 2500  # its timer (due - claim ahead) lies between the clock and the wheel
    await create(store, clock.now_ms(), ("j1", due))

    await run_until(start + 30_000, h, max_step_ms=50)

    times = h.queue.times("j1")
    assert len(times) == 1, f"expected one publish, got {times}"
    assert due - 2000 <= times[0] <= due, f"published {due - times[0]} ms before due"
    assert times[0] >= due - CLAIM_AHEAD_MS - 500, "not claimed before the clock got there"
