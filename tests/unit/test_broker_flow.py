"""The broker end to end in one process: MemoryStore + MemoryQueue + a real HTTP receiver.

Time is a FakeClock driven by the tests (`run_for`, `run_until`, `drive`): the
broker, the receiver's slow answers and the daemon stand-in all wait on it, so
nothing here sleeps. The harness (tests/unit/broker_harness.py) is shared with the
integration tests, which give it the system clock.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

import pytest

from broker.callback import USER_AGENT
from tests.unit.broker_harness import (
    World,
    fast_retry,
    started,
    wait_for_states,
)
from timer_service.dispatch import HeldBiz
from timer_service.model import BizType, Job, JobState, second_of
from timer_service.receiver import verify_callback

# -- tests --------------------------------------------------------------------------------


async def test_delivers_on_time_never_early_with_contract_headers(world: World) -> None:
    await world.put_biz("orders", signing_secret="s3cret")
    await started(world)
    due = world.clock.now_ms() + 400
    jobs = await world.create("orders", ["a", "b", "c"], due, payload={"n": 1, "s": "é"})
    world.daemon.watch([due])
    assert await world.daemon.dispatch_once() == 3
    done = await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    assert len(world.receiver.received) == 3, f"expected 3 callbacks, got {world.receiver.received}"
    for r in world.receiver.received:
        assert r.at_ms >= due, f"early by {due - r.at_ms:.1f} ms"
        assert r.at_ms - due < 100, f"late by {r.at_ms - due:.1f} ms"
        body = r.json
        assert body["payload"] == {"n": 1, "s": "é"}
        assert body["due_at"] == due and body["attempt"] == 1
        assert r.headers["Idempotency-Key"] == f"orders:{body['job_id']}"
        assert r.headers["X-Timer-Attempt"] == "1"
        assert r.headers["X-Timer-Timestamp"] == str(body["fired_at"])
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["Content-Length"] == str(len(r.body))
        assert "chunked" not in r.headers.get("Transfer-Encoding", "")
        assert r.headers["User-Agent"] == USER_AGENT
        assert r.headers["webhook-timestamp"] == str(body["fired_at"] // 1000)
        verified = verify_callback(r.body, r.headers, "s3cret", now_ms=body["fired_at"])
        assert verified.idempotency_key == f"orders:{body['job_id']}", verified
    for job in done:
        (attempt,) = job.history
        body = world.receiver.for_job(job.job_id)[0].json
        assert attempt.at == body["fired_at"] and attempt.status_code == 200, f"got {attempt}"
    assert world.metric("timer_callbacks_total", biz_type="orders", outcome="delivered") == 3
    assert world.metric("timer_delivery_lateness_seconds_count", biz_type="orders") == 3


async def test_retries_then_delivers_with_backoff_gaps(world: World) -> None:
    statuses = iter([500, 503, 200])
    world.receiver.responder = lambda r: (next(statuses), {}, 0.0)
    await world.put_biz("orders", retry=fast_retry())
    await started(world)
    due = world.clock.now_ms() + 100
    jobs = await world.create("orders", ["r1"], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    (job,) = await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    got = [(a.attempt, a.status_code, a.error) for a in job.history]
    assert got == [(1, 500, "HTTP 500"), (2, 503, "HTTP 503"), (3, 200, None)], f"got {got}"
    arrivals = [r.at_ms for r in world.receiver.for_job("r1")]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert gaps[0] >= 100 and gaps[1] >= 200, f"expected gaps >= 100, 200 ms, got {gaps}"
    assert [r.headers["X-Timer-Attempt"] for r in world.receiver.for_job("r1")] == ["1", "2", "3"]
    assert world.metric("timer_callbacks_total", biz_type="orders", outcome="retry") == 2


async def test_jobs_failed_together_come_back_spread_never_early(world: World) -> None:
    """The backoff's jitter: 20 jobs failed in one moment get different retry times,
    each the formula's wait after its outcome plus at most a tenth (the 2 ms of slack:
    the outcome's moment is read back as the attempt's start plus its duration)."""
    world.receiver.responder = lambda r: (503, {}, 0.0)
    await world.put_biz("orders", retry=fast_retry(max_attempts=2, initial_ms=1000))
    await started(world)
    due = world.clock.now_ms() + 100
    jobs = await world.create("orders", [f"s{i}" for i in range(20)], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    failed: list[Job] = []
    for _ in range(150):  # 3 s of the fake clock
        found = [await world.store.jobs.get_job(b, j) for b, j in jobs]
        failed = [f for f in found if f is not None and f.attempts == 1 and f.history]
        if len(failed) == len(jobs):
            break
        await world.clock.run_for(20)
    assert len(failed) == len(jobs), f"{len(failed)} of {len(jobs)} failed once"
    waits = []
    for job in failed:
        assert job.state == JobState.PENDING and job.next_attempt_at is not None
        waits.append(job.next_attempt_at - job.history[-1].at - job.history[-1].duration_ms)
    assert min(waits) >= 1000 - 2 and max(waits) <= 1100, f"formula 1 s, +10%: {waits}"
    retry_times = [
        (await world.store.jobs.get_job(b, j)).next_attempt_at  # type: ignore[union-attr]
        for b, j in jobs
    ]
    assert len(set(retry_times)) > 1, f"every job retries at once: {retry_times}"


async def test_permanent_failure_is_dead_at_once(world: World) -> None:
    world.receiver.responder = lambda r: (400, {}, 0.0)
    await world.put_biz("orders", retry=fast_retry())
    await started(world)
    due = world.clock.now_ms()
    jobs = await world.create("orders", ["bad"], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    (job,) = await wait_for_states(world.store, jobs, {JobState.DEAD}, 5, world.clock)
    assert [a.status_code for a in job.history] == [400], f"got {job.history}"
    await world.clock.run_for(300)
    assert len(world.receiver.received) == 1


async def test_exhausted_attempts_are_dead(world: World) -> None:
    world.receiver.responder = lambda r: (503, {"Retry-After": "0"}, 0.0)
    await world.put_biz("orders", retry=fast_retry(max_attempts=3))
    await started(world)
    due = world.clock.now_ms()
    jobs = await world.create("orders", ["x"], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    (job,) = await wait_for_states(world.store, jobs, {JobState.DEAD}, 5, world.clock)
    assert [a.attempt for a in job.history] == [1, 2, 3], f"got {job.history}"


async def test_timeout_and_connection_error_are_retried(world: World) -> None:
    world.receiver.responder = lambda r: (200, {}, 1.0)
    await world.put_biz("slow", timeout_ms=100, retry=fast_retry(max_attempts=1))
    world_biz_down = BizType("down", "http://127.0.0.1:9/nothing", retry=fast_retry(max_attempts=1))
    await world.store.biz_types.put_biz_type(world_biz_down)
    await started(world)
    due = world.clock.now_ms()
    jobs = await world.create("slow", ["t"], due) + await world.create("down", ["c"], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    slow, down = await wait_for_states(world.store, jobs, {JobState.DEAD}, 5, world.clock)
    assert slow.history[0].error == "timeout" and slow.history[0].status_code is None
    assert (down.history[0].error or "").startswith("connection error"), f"got {down.history}"


async def test_cancelled_after_publication_is_not_called_back(world: World) -> None:
    await world.put_biz("orders")
    await started(world)
    due = world.clock.now_ms() + 500
    jobs = await world.create("orders", ["keep", "cancel"], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    await world.store.jobs.cancel_job("orders", "cancel", world.clock.now_ms())
    await wait_for_states(world.store, jobs[:1], {JobState.DELIVERED}, 5, world.clock)
    await world.clock.run_for(100)
    got = [r.json["job_id"] for r in world.receiver.received]
    assert got == ["keep"], f"expected only 'keep' called back, got {got}"
    assert world.metric("timer_messages_dropped_total", biz_type="orders") == 1


async def test_duplicate_and_stale_messages_send_once(world: World) -> None:
    await world.put_biz("orders")
    await started(world)
    due = world.clock.now_ms() + 200
    jobs = await world.create("orders", ["d"], due)
    world.daemon.watch([due])
    (claimed,) = await world.store.scan.claim_due(
        second_of(due), due, "claim-1", 1, world.clock.now_ms()
    )
    stale = type(claimed)(
        **{**{s: getattr(claimed, s) for s in claimed.__slots__}, "claim": "old-claim"}
    )
    await world.queue.publish([claimed, claimed, stale])
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    await world.clock.run_for(300)
    got = world.receiver.received
    assert len(got) == 1, f"expected one callback, got {got}"
    assert world.metric("timer_messages_dropped_total", biz_type="orders") == 2


async def test_paused_holds_then_sends_after_unpause(world: World) -> None:
    biz = await world.put_biz("orders", paused=True)
    await started(world)
    due = world.clock.now_ms()
    jobs = await world.create("orders", [f"p{i}" for i in range(5)], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    await world.clock.run_for(1500)
    assert world.receiver.received == [], "a paused biz type was called back"
    await world.store.biz_types.put_biz_type(replace(biz, paused=False))
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    assert len(world.receiver.received) == 5


async def test_rate_limit_and_in_flight_cap(world: World) -> None:
    world.receiver.responder = lambda r: (200, {}, 0.05 if r.path == "/capped" else 0.0)
    await world.put_biz("limited", rate_limit_per_s=50, burst=5)
    await world.put_biz("capped", max_concurrency=3)
    await started(world)
    due = world.clock.now_ms() + 200
    jobs = await world.create("limited", [f"l{i}" for i in range(40)], due)
    jobs += await world.create("capped", [f"c{i}" for i in range(30)], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 10, world.clock)
    sent = [int(r.headers["X-Timer-Timestamp"]) / 1000 for r in world.receiver.for_biz("limited")]
    for window_s in (0.0, 0.05, 0.1, 0.2, 0.5):
        allowed = 5 + 50 * (window_s + 0.002)  # ms timestamps, taken just after the token
        got = max(sum(1 for b in sent if a <= b <= a + window_s) for a in sent)
        assert got <= allowed, f"W={window_s}s: expected <= {allowed:.1f} sends, got {got}"
    assert world.receiver.max_in_flight["capped"] <= 3, f"got {world.receiver.max_in_flight}"
    assert world.metric("timer_rate_limited_total", biz_type="limited") > 0
    assert world.metric("timer_rate_limited_total", biz_type="capped") > 0


async def test_stop_finishes_in_flight_and_hands_back_held(world: World) -> None:
    world.receiver.responder = lambda r: (200, {}, 0.3)
    await world.put_biz("orders", max_concurrency=2)
    await started(world)
    due = world.clock.now_ms()
    jobs = await world.create("orders", [f"s{i}" for i in range(6)], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    await world.clock.run_for(150)  # two in flight, four held
    await world.clock.drive(world.broker.stop())
    states = [(await world.store.jobs.get_job(b, j)).state for b, j in jobs]  # type: ignore[union-attr]
    assert states.count(JobState.DELIVERED) == 2, f"expected 2 delivered, got {states}"
    assert states.count(JobState.DISPATCHED) == 4, f"expected 4 still dispatched, got {states}"
    depth = await world.queue.queue_depth("orders")
    assert depth == 4, f"expected the 4 held messages back in the queue, got {depth}"


async def test_heartbeat_says_what_is_held(world: World) -> None:
    await world.put_biz("orders", paused=True)
    await started(world)
    due = world.clock.now_ms()
    await world.create("orders", ["h"], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()

    (claimed,) = await world.store.reconcile.find_stale_dispatched(world.clock.now_ms() + 1, 10)

    async def held() -> list[HeldBiz]:
        return [h for beat in await world.store.brokers.broker_beats() for h in beat.held]

    async def reported() -> bool:
        return bool(await held())

    assert await world.clock.run_until(reported, 4000), "heartbeat never reported 'orders' held"
    expected = [HeldBiz("orders", 1, claimed.claimed_at or 0)]
    got = await held()
    print(f"expected {expected}, got {got}")
    assert got == expected
    await world.clock.drive(world.broker.stop())
    assert await world.store.brokers.broker_beats() == [], "a stopped broker is forgotten"


async def test_stop_ends_a_loop_whose_store_call_dropped_the_cancel(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # PyMongo on Python 3.11 can drop a cancel (asyncio.wait_for in its network layer):
    # the broker's discovery, cancelled in its store call, must not loop on.
    await started(world)
    asking = asyncio.Event()
    port: Any = world.store.biz_types
    original = port.list_biz_types

    async def dropping_the_cancel() -> Any:
        asking.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # answered as if the reply had come
        return await original()

    port.list_biz_types = dropping_the_cancel
    assert await world.clock.run_until(asking.is_set, 5000)
    tasks = [*world.broker._tasks, world.broker._beating]
    await world.clock.drive(world.broker.stop())
    assert all(t is not None and t.done() for t in tasks), tasks
    assert "did not stop in time" not in caplog.text


async def test_config_change_applies_without_restart(world: World) -> None:
    await world.put_biz("orders")
    await started(world)
    await world.store.biz_types.put_biz_type(
        BizType("orders", world.receiver.url("moved"), signing_secret="new")
    )
    await world.clock.run_for(1300)
    due = world.clock.now_ms()
    jobs = await world.create("orders", ["m"], due)
    world.daemon.watch([due])
    await world.daemon.dispatch_once()
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    (r,) = world.receiver.received
    assert r.path == "/moved" and "webhook-signature" in r.headers, f"got {r.path} {r.headers}"


async def test_deleted_biz_type_stops_its_consumer(world: World) -> None:
    await world.put_biz("orders")
    await world.put_biz("other")
    await started(world)
    assert world.broker.biz_types == ["orders", "other"]
    await world.store.biz_types.delete_biz_type("orders")
    stopped = await world.clock.run_until(lambda: world.broker.biz_types == ["other"], 3000)
    assert stopped, f"expected ['other'], got {world.broker.biz_types}"
