"""The daemon driven by hand: FakeClock + MemoryStore + MemoryQueue, no sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from daemon.lease import LEASE_NAME
from daemon.scan_state import COALESCE_MS
from tests.unit.daemon_harness import (
    BIZ,
    CLAIM_AHEAD_MS,
    Harness,
    RecordingQueue,
    create,
    run_until,
)
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState, second_of
from timer_service.store.memory import MemoryStore


async def test_jobs_are_published_claim_ahead_before_due_and_never_more_than_2s(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    due = {f"j{i}": start + 300 + i * 137 for i in range(60)}  # 0.3 s .. 8.4 s ahead
    await create(store, start, *due.items())

    await run_until(start + 10_000, h)

    for job_id, due_at in due.items():
        times = h.queue.times(job_id)
        assert len(times) == 1, f"{job_id}: expected one publish, got {times}"
        ahead = due_at - times[0]
        # Claimed ahead, with what falls due within the coalescing window after.
        assert 0 <= ahead <= CLAIM_AHEAD_MS + COALESCE_MS, (
            f"{job_id}: expected publish 0..{CLAIM_AHEAD_MS + COALESCE_MS} ms before due,"
            f" got {ahead} ms"
        )
        assert ahead <= 2000
        job = await store.jobs.get_job(BIZ, job_id)
        assert job is not None and job.state == JobState.DISPATCHED, job
    unconfirmed = await store.reconcile.find_unpublished(clock.now_ms() + 1, 1000)
    assert unconfirmed == [], f"every claim's round should be closed, got {unconfirmed}"


async def test_claims_are_batched_per_second(store: MemoryStore, clock: FakeClock) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    # 500 jobs, one every 2 ms, in the same two seconds.
    await create(store, start, *((f"j{i}", start + 3000 + 2 * i) for i in range(500)))
    await run_until(start + 5000, h)

    assert len(h.queue.published) == 500
    # At most one claim per second per 50 ms round (plus rounding), not one per job.
    assert store.ops["claim_due"] <= 2 * 1000 // 50 + 4, store.ops


async def test_a_herd_is_claimed_in_bounded_steps_with_other_seconds_between(
    store: MemoryStore, clock: FakeClock
) -> None:
    """450 jobs due in the same millisecond are claimed 100 per round trip
    (TIMER_CLAIM_BATCH), and a job of the next second due just after them goes out
    with the herd's first batch, not behind the whole herd."""
    h = Harness(store, clock, claim_batch=100)
    start = clock.now_ms()
    herd_at = (second_of(start) + 3) * 1000 + 999
    await create(store, start, *((f"h{i:03}", herd_at) for i in range(450)))
    await create(store, start, ("other", herd_at + 1))
    sizes: list[int] = []
    claim_due = store.scan.claim_due

    async def counted(*args: object) -> list[Claimed]:
        got = await claim_due(*args)  # type: ignore[arg-type]
        sizes.append(len(got))
        return got

    store.scan.claim_due = counted  # type: ignore[method-assign]
    await run_until(herd_at + 100, h)

    published = [job.job_id for _, job in h.queue.at]
    assert sorted(published) == sorted([f"h{i:03}" for i in range(450)] + ["other"])
    assert max(sizes) == 100, f"claims of at most 100, got {sizes}"
    assert published.index("other") <= 200, "the other second waited for the whole herd"
    for job_id in ("h000", "h449", "other"):
        [at] = h.queue.times(job_id)
        assert at <= herd_at, f"{job_id} published at {at - herd_at} ms past due"


async def test_cancelled_job_in_the_wheel_is_never_published(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    await create(store, start, ("gone", start + 3000), ("stays", start + 3000))
    await run_until(start + 100, h)
    assert h.daemon.scanner.loaded_jobs == 2, "both jobs should be in the wheel"

    await store.jobs.cancel_job(BIZ, "gone", clock.now_ms())
    await run_until(start + 6000, h)

    assert h.queue.times("gone") == [], "a cancelled job was published"
    assert len(h.queue.times("stays")) == 1


async def test_loaded_jobs_counts_jobs_not_the_sweep_rounds_of_a_second_written_into(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A loaded second that is written into again gets claim rounds (wheel timers) of its
    own; they are not jobs. Counting wheel timers made an integration test see 14 loaded
    jobs for 3 in CI, when a watch event came after the load."""
    h = Harness(store, clock)
    start = clock.now_ms()
    await create(store, start, ("a", start + 3000), ("b", start + 3000))
    await run_until(start + 100, h)
    await create(store, clock.now_ms(), ("c", start + 3000))  # written into while loaded
    h.daemon.scanner.nudge((start + 3000) // 1000)  # as the change stream reports it
    await run_until(start + 200, h)
    assert h.daemon.scanner.loaded_jobs == 2


@pytest.mark.parametrize(
    "move_ms", [2500, 300, -500], ids=["later-second", "same-second", "earlier"]
)
async def test_rescheduled_job_is_published_at_its_new_time_only(
    store: MemoryStore, clock: FakeClock, move_ms: int
) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    old_due = start + 3200
    await create(store, start, ("moved", old_due))
    await run_until(start + 100, h)
    assert h.daemon.scanner.loaded_jobs == 1

    new_due = old_due + move_ms
    await store.jobs.reschedule_job(BIZ, "moved", new_due, None, clock.now_ms())
    h.daemon.nudge(second_of(new_due))  # what the API (dev) or the change stream does
    await run_until(start + 8000, h)

    times = h.queue.times("moved")
    assert len(times) == 1, f"expected one publish, got {times}"
    earliest = new_due - CLAIM_AHEAD_MS - COALESCE_MS
    assert earliest <= times[0] <= new_due, (
        f"expected publish in [{earliest}, {new_due}], got {times[0]}"
    )
    assert h.queue.published[0].next_attempt_at == new_due


async def test_job_created_into_a_passed_second_goes_out_on_the_next_step(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock)
    await run_until(clock.now_ms() + 3000, h)
    now = clock.now_ms()
    await create(store, now, ("late", now - 2500))
    h.daemon.nudge(second_of(now - 2500))
    await h.step()
    assert h.queue.times("late") == [now], f"expected publish at {now}, got {h.queue.times('late')}"


async def test_job_written_into_a_loaded_second_after_loading_is_published(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock, watch=False)
    start = clock.now_ms()
    await create(store, start, ("first", start + 2100))
    await run_until(start + 100, h)
    await create(store, clock.now_ms(), ("second", start + 2600))  # same second, no nudge
    await run_until(start + 5000, h)
    # The release of the second misses (its version moved), so it is read again.
    assert len(h.queue.times("first")) == 1
    assert len(h.queue.times("second")) == 1
    t = h.queue.times("second")[0]
    assert start + 2600 - CLAIM_AHEAD_MS - COALESCE_MS <= t <= start + 2600, t


async def test_without_watch_or_nudge_the_safety_poll_finds_a_missed_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock, watch=False)
    await run_until(clock.now_ms() + 2000, h)
    now = clock.now_ms()
    await create(store, now, ("missed", now - 1500))
    await run_until(now + 10_500, h)
    times = h.queue.times("missed")
    assert len(times) == 1 and times[0] - now <= 10_500, times


async def test_catch_up_obeys_the_rate_bound_and_fresh_jobs_stay_on_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    rate = 400
    start = clock.now_ms()
    # A backlog written while no daemon ran: 3000 jobs over the last 30 minutes.
    await create(
        store, start - 1_800_000, *((f"old{i}", start - 1_800_000 + i * 600) for i in range(3000))
    )
    fresh_due = start + 2500
    await create(store, start, ("fresh", fresh_due))
    h = Harness(store, clock, catchup_rate_per_s=rate)

    await run_until(start + 4000, h, max_step_ms=50)

    fresh = h.queue.times("fresh")
    assert len(fresh) == 1 and fresh_due - CLAIM_AHEAD_MS <= fresh[0] <= fresh_due, fresh
    old = [(t, job) for t, job in h.queue.at if job.job_id.startswith("old")]
    elapsed_s = (clock.now_ms() - start) / 1000
    bound = rate * elapsed_s + rate * 0.2 + 1
    assert 0 < len(old) <= bound, (
        f"expected 1..{bound:.0f} backlog jobs in {elapsed_s}s, got {len(old)}"
    )
    dues = [job.next_attempt_at for _, job in old]
    assert dues == sorted(dues), "backlog must go oldest first"

    await run_until(start + 12_000, h, max_step_ms=50)
    assert len([1 for _, j in h.queue.at if j.job_id.startswith("old")]) == 3000
    assert store.ops["release_second"] >= 1


async def test_lost_lease_stops_claims_and_takeover_increases_fence(
    store: MemoryStore, clock: FakeClock
) -> None:
    a = Harness(store, clock)
    b = Harness(store, clock)
    start = clock.now_ms()
    await run_until(start + 100, a, b)
    assert a.daemon.is_leader and not b.daemon.is_leader
    first_fence = a.daemon.fence
    assert first_fence is not None

    # A stalls (no renew) past its TTL; B takes over.
    clock.advance(3500)
    await b.step()
    assert b.daemon.is_leader and b.daemon.fence is not None
    assert b.daemon.fence > first_fence, f"expected fence > {first_fence}, got {b.daemon.fence}"
    assert not a.daemon.is_leader, "A's lease deadline passed: it must not claim"

    now = clock.now_ms()
    await create(store, now, *((f"j{i}", now + 1500 + i * 100) for i in range(20)))
    await run_until(now + 5000, a, b)
    assert a.queue.published == [], f"A published after losing the lease: {a.queue.published}"
    assert len(b.queue.published) == 20


async def test_failed_renew_steps_down_at_once(store: MemoryStore, clock: FakeClock) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    await create(store, start, ("j", start + 3000))
    await run_until(start + 100, h)
    assert h.daemon.is_leader and h.daemon.scanner.loaded_jobs == 1

    async def refuse(*_: object) -> list[str]:
        return []

    store.leases.renew_leases = refuse  # type: ignore[method-assign]
    # What a takeover by another daemon looks like to the store.
    fence = await store.leases.next_fence(0)
    await store.leases.acquire_leases(
        [LEASE_NAME], "someone-else", fence, 60_000, clock.now_ms() + 3001
    )
    await run_until(start + 5000, h)
    assert not h.daemon.is_leader
    assert h.queue.published == []
    assert h.daemon.scanner.loaded_jobs == 0, "the wheel is cleared on stepping down"


async def test_stop_releases_the_lease_for_a_fast_takeover(
    store: MemoryStore, clock: FakeClock
) -> None:
    a = Harness(store, clock)
    b = Harness(store, clock)
    await a.step()
    assert a.daemon.is_leader
    await a.daemon.stop()
    await a.daemon.stop()  # idempotent
    clock.advance(1)
    await b.step()
    assert b.daemon.is_leader, "B should take over at once after A released the lease"


async def test_every_loop_ends_on_a_cancel_that_comes_with_its_wakeup(
    store: MemoryStore, clock: FakeClock
) -> None:
    # A wakeup in the same turn as the shutdown cancel: on Python 3.11 a loop sleeping
    # in asyncio.wait_for took the wakeup, dropped the cancel and ran on (CI: the stats
    # loop was "left behind" at SIGTERM).
    h = Harness(store, clock, stats_interval_s=60)
    await h.step()
    await h.daemon.start()
    loops = list(h.daemon._tasks)
    await asyncio.sleep(0.05)  # every loop is asleep
    h.daemon._lease_changed()  # wakes each one
    for task in loops:
        task.cancel()
    _, running = await asyncio.wait(loops, timeout=2)
    assert not running, f"ran on after the cancel: {[t.get_name() for t in running]}"
    await h.daemon.stop()


async def test_every_loop_ends_when_a_store_call_drops_the_shutdown_cancel(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # PyMongo on Python 3.11 can drop a cancel (asyncio.wait_for in its network layer);
    # the stats loop, cancelled in its job count, went back to sleep (CI, twice).
    h = Harness(store, clock, stats_interval_s=60)
    await h.step()
    counting = asyncio.Event()

    async def count_dropping_the_cancel(states: object) -> dict[object, int]:
        counting.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # answered as if the reply had come
        return {}

    store.counts.count_jobs = count_dropping_the_cancel  # type: ignore[method-assign]
    await h.daemon.start()
    loops = list(h.daemon._tasks)
    await asyncio.wait_for(counting.wait(), 10)  # at once; the margin is for a loaded host
    await h.daemon.stop()
    assert all(task.done() for task in loops), [t.get_name() for t in loops if not t.done()]
    assert "did not stop in time" not in caplog.text


async def test_idle_with_jobs_parked_a_year_ahead_makes_no_second_queries(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    year_ms = 365 * 86_400_000
    await create(store, start, *((f"p{i}", start + year_ms + i * 10) for i in range(10_000)))
    h = Harness(store, clock, lease_ttl_ms=30_000)  # renews every 10 s
    await run_until(start + 5000, h)
    before = dict(store.ops)
    rounds = await run_until(start + 65_000, h, max_step_ms=60_000)
    wake = await h.daemon.scanner.run_once()
    # Asleep until the next safety poll (every 10 s), not the next second.
    assert wake - clock.now_ms() > 1000, f"expected a long sleep, got {wake - clock.now_ms()} ms"

    calls = {k: v - before.get(k, 0) for k, v in store.ops.items() if v != before.get(k, 0)}
    assert calls.get("load_second", 0) == 0 and calls.get("claim_due", 0) == 0, calls
    # A safety poll every 10 s (two listings) is all: nothing per second.
    assert calls.get("next_seconds", 0) <= 2 * 7, calls
    assert rounds <= 14, f"the loop should sleep, not spin: {rounds} rounds in 60 s"
    assert h.daemon.scanner.loaded_jobs == 0


async def test_pointer_is_saved_and_scan_lag_reported(store: MemoryStore, clock: FakeClock) -> None:
    start = clock.now_ms()
    await create(store, start - 60_000, *((f"old{i}", start - 60_000 + i) for i in range(10)))
    h = Harness(store, clock)
    await h.step()
    assert (await store.pointers.load_pointers(["p0"])).get("p0") == second_of(start - 60_000)
    lag = h.daemon.metrics.registry.get_sample_value("timer_scan_lag_seconds")
    assert lag == 60, f"expected 60 s of lag during catch-up, got {lag}"
    await run_until(start + 2000, h)
    assert (await store.pointers.load_pointers(["p0"])).get("p0") == second_of(clock.now_ms())
    assert h.daemon.metrics.registry.get_sample_value("timer_scan_lag_seconds") == 0
    assert h.daemon.metrics.registry.get_sample_value("timer_daemon_leader") == 1


async def test_only_the_leader_exports_job_counts_per_biz_type_and_state(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    for name in ("orders", "quiet"):
        await store.biz_types.put_biz_type(
            BizType(name, "http://127.0.0.1:1/", created_at=1, updated_at=1)
        )
    await create(store, start, *((f"j{i}", start + 60_000) for i in range(3)))
    a, b = Harness(store, clock), Harness(store, clock)
    await a.step()
    await b.step()

    def sample(h: Harness, biz: str, state: str) -> float | None:
        return h.daemon.metrics.registry.get_sample_value(
            "timer_jobs_by_state", {"biz_type": biz, "state": state}
        )

    await a.daemon.sample_job_counts()
    await b.daemon.sample_job_counts()
    assert sample(a, "orders", "pending") == 3
    assert sample(a, "orders", "dead") == 0 and sample(a, "quiet", "pending") == 0
    assert sample(b, "orders", "pending") is None, "a standby must not export a second copy"

    clock.advance(3500)  # A stalls past its TTL; B takes over
    await b.step()
    await a.step()
    assert b.daemon.is_leader and not a.daemon.is_leader
    assert sample(a, "orders", "pending") is None, "stepping down removes the sample"
    await b.daemon.sample_job_counts()
    assert sample(b, "orders", "pending") == 3


async def test_writes_into_a_loaded_second_are_swept_not_reloaded(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A second that fills while loaded must not be re-read once per write (O(n^2))."""
    h = Harness(store, clock)
    start = clock.now_ms()
    target_s = second_of(start) + 4  # inside the look-ahead window, loaded at once
    await create(store, start, ("first", target_s * 1000 + 10))
    await h.step()
    loads_before = store.ops["load_second"]
    due: dict[str, int] = {}
    for i in range(100):  # a hundred separate writes into the loaded second
        clock.advance(10)
        job = (f"late{i}", target_s * 1000 + (i * 9) % 1000)
        due[job[0]] = job[1]
        await create(store, clock.now_ms(), job)
        await h.step()
    await run_until(target_s * 1000 + 2000, h)

    reloads = store.ops["load_second"] - loads_before
    assert reloads <= 2, f"expected the changed second to be swept, got {reloads} reloads"
    for job_id, due_at in due.items():
        times = h.queue.times(job_id)
        assert len(times) == 1, f"{job_id}: published {len(times)} times"
        ahead = due_at - times[0]
        assert 0 < ahead <= 2000, f"{job_id} published {ahead} ms before due"
        sweep_step = 100
        assert ahead >= CLAIM_AHEAD_MS - sweep_step - 50, f"{job_id} only {ahead} ms ahead"
    assert store.ops["release_second"] >= 1
    assert await store.scan.next_seconds(target_s, target_s, 1) == []


class SlowQueue(RecordingQueue):
    """Each publish call takes real time, as confirms from a busy RabbitMQ do."""

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        await asyncio.sleep(0.005)
        await super().publish(jobs)


async def test_a_herd_of_one_biz_type_does_not_hold_back_another(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock, publish_batch=50)
    h.queue = SlowQueue(clock)
    h.daemon.queue = h.queue
    h.daemon.publisher._queue = h.queue
    start = clock.now_ms()
    herd_due = (second_of(start) + 3) * 1000
    await create(store, start, *((f"h{i}", herd_due + 500) for i in range(2000)))
    await create(store, start, ("steady", herd_due + 500), biz="coupons")
    order: list[str] = []
    original = h.queue.publish

    async def recording(jobs: Sequence[Claimed]) -> None:
        await original(jobs)
        order.extend(job.job_id for job in jobs)

    h.queue.publish = recording  # type: ignore[method-assign]
    await run_until(herd_due + 1000, h)

    assert len(order) == 2001, f"published {len(order)} of 2001"
    position = order.index("steady")
    assert position < 200, f"the other biz type's job went out as number {position} of 2001"


async def test_claims_piled_up_during_an_outage_go_out_together(
    store: MemoryStore, clock: FakeClock
) -> None:
    """RabbitMQ away: every tick's small claim waits behind the first one's retries.
    Once it is back they are published in one round, not one confirm round each."""
    from daemon.publisher import Publisher

    class Flaky(RecordingQueue):
        down = True
        rounds = 0

        async def publish(self, jobs: Sequence[Claimed]) -> None:
            self.rounds += 1
            if self.down:
                raise ConnectionError("RabbitMQ away")
            await super().publish(jobs)

    queue = Flaky(clock)
    closed: list[str] = []
    publisher = Publisher(queue, Metrics(), clock, 100, closed.extend, retry_max_wait_s=0.01)
    now = clock.now_ms()
    claims = [Claimed(BIZ, f"j{i}", second_of(now), now, now, 1, f"c{i}") for i in range(30)]
    leading = True
    for claim in claims:
        publisher.submit([claim], lambda: leading)
    await clock.run_for(50)  # the first claim retries; the other 29 pile up
    queue.down = False
    rounds_while_down = queue.rounds
    assert await clock.drive(publisher.drain(5))
    assert [job.job_id for job in queue.published] == [f"j{i}" for i in range(30)]
    assert queue.rounds - rounds_while_down <= 2, "the piled-up claims should go out together"
    assert sorted(closed) == sorted(f"c{i}" for i in range(30)), "every round is confirmed"
