"""The broker against real RabbitMQ, the MongoDB protocol (SecantusDB) and a loopback receiver.

The test plays the daemon (claim + publish, `DaemonStandIn`); brokers run in process
or as `timer-service broker` subprocesses.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
from standardwebhooks import Webhook

from broker.app import Broker
from tests.integration.broker_env import Env
from tests.support import AMQP_URL
from tests.unit.broker_harness import (
    Received,
    create,
    fast_retry,
    now_ms,
    wait_for_states,
)
from timer_service.clock import SystemClock
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import JobState
from timer_service.queue.amqp import AmqpQueue
from timer_service.settings import Settings

pytestmark = pytest.mark.integration


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
async def broker(env: Env) -> AsyncIterator[Broker]:
    settings = Settings(shutdown_grace_s=5, queue_prefix=env.prefix)  # type: ignore[call-arg]
    b = Broker(settings, env.store, env.queue, Metrics(), SystemClock(), broker_id="itest")
    yield b
    await b.stop()


def max_in_window(times_s: list[float], window_s: float) -> int:
    times_s = sorted(times_s)
    best, j = 0, 0
    for i, t in enumerate(times_s):
        while times_s[j] < t - window_s:
            j += 1
        best = max(best, i - j + 1)
    return best


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"expected {what} within {timeout_s}s"
        await asyncio.sleep(0.01)


def check_signature(r: Received, secret: str) -> None:
    """The reference Standard Webhooks library accepts it (a plain secret: its UTF-8 bytes)."""
    body = r.json
    assert r.headers["webhook-id"] == f"{body['biz_type']}:{body['job_id']}", r.headers
    assert r.headers["webhook-timestamp"] == str(body["fired_at"] // 1000), r.headers
    got = Webhook(secret.encode()).verify(r.body, r.headers)
    assert got == body, f"expected the body back, got {got}"


# -- in-process broker ----------------------------------------------------------------------------


async def test_callback_headers_body_and_signature(env: Env, broker: Broker) -> None:
    await env.put_biz("orders", signing_secret="top-secret")
    await broker.start()
    due = now_ms() + 800
    payload = {"order": 42, "items": [1, 2], "note": "ünïcode"}
    jobs = await create(env.store, "orders", ["o-1", "o-2"], due, payload=payload)
    env.daemon.watch([due])
    assert await env.daemon.dispatch_once() == 2
    done = await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 10)
    assert len(env.receiver.received) == 2, f"expected 2 callbacks, got {env.receiver.received}"
    for r in env.receiver.received:
        body = r.json
        expected_keys = {"biz_type", "job_id", "payload", "due_at", "fired_at", "attempt", "labels"}
        assert set(body) == expected_keys, f"expected {expected_keys}, got {set(body)}"
        assert body["payload"] == payload and body["due_at"] == due and body["attempt"] == 1
        assert body["labels"] == {}, f"a job created without labels has none: {body['labels']}"
        assert body["fired_at"] >= due, f"early: fired_at {body['fired_at']} < due {due}"
        assert r.at_ms >= due, f"arrived {due - r.at_ms:.1f} ms early"
        assert r.headers["Content-Type"] == "application/json"
        assert r.headers["Content-Length"] == str(len(r.body))
        assert r.headers["Idempotency-Key"] == f"orders:{body['job_id']}"
        assert r.headers["X-Timer-Attempt"] == "1"
        assert r.headers["X-Timer-Timestamp"] == str(body["fired_at"])
        check_signature(r, "top-secret")
    for job in done:
        (attempt,) = job.history
        fired_at = env.receiver.for_job(job.job_id)[0].json["fired_at"]
        assert (attempt.at, attempt.status_code) == (fired_at, 200), f"got {attempt}"


async def test_500_500_200_delivered_on_attempt_3_with_backoff(env: Env, broker: Broker) -> None:
    statuses = iter([500, 500, 200])
    env.receiver.responder = lambda r: (next(statuses), {}, 0.0)
    await env.put_biz("orders", retry=fast_retry(initial_ms=300))
    await broker.start()
    due = now_ms() + 200
    jobs = await create(env.store, "orders", ["retry-me"], due)
    env.daemon.watch([due])
    env.daemon.run(jobs)
    (job,) = await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 15)
    got = [(a.attempt, a.status_code, a.error) for a in job.history]
    assert got == [(1, 500, "HTTP 500"), (2, 500, "HTTP 500"), (3, 200, None)], f"got {got}"
    arrivals = [r.at_ms for r in env.receiver.for_job("retry-me")]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert len(gaps) == 2 and gaps[0] >= 300 and gaps[1] >= 600, (
        f"expected gaps >= 300 and >= 600 ms, got {gaps}"
    )
    attempts = [r.headers["X-Timer-Attempt"] for r in env.receiver.for_job("retry-me")]
    assert attempts == ["1", "2", "3"], f"got {attempts}"


async def test_400_is_dead_at_once(env: Env, broker: Broker) -> None:
    env.receiver.responder = lambda r: (400, {}, 0.0)
    await env.put_biz("orders", retry=fast_retry())
    await broker.start()
    due = now_ms()
    jobs = await create(env.store, "orders", ["bad-request"], due)
    env.daemon.watch([due])
    env.daemon.run(jobs)
    (job,) = await wait_for_states(env.store, jobs, {JobState.DEAD}, 10)
    got = [(a.status_code, a.error) for a in job.history]
    assert got == [(400, "HTTP 400")], f"got {got}"


async def test_always_503_dead_then_replay_delivers(env: Env, broker: Broker) -> None:
    answers = {"status": 503}
    env.receiver.responder = lambda r: (answers["status"], {}, 0.0)
    await env.put_biz("orders", retry=fast_retry(max_attempts=3, initial_ms=100))
    await broker.start()
    due = now_ms()
    jobs = await create(env.store, "orders", ["flaky"], due)
    env.daemon.watch([due])
    env.daemon.run(jobs)
    (job,) = await wait_for_states(env.store, jobs, {JobState.DEAD}, 15)
    assert [a.status_code for a in job.history] == [503, 503, 503], f"got {job.history}"
    answers["status"] = 200
    replayed = await env.store.jobs.replay_job("orders", "flaky", now_ms())
    assert replayed.next_attempt_at is not None
    env.daemon.watch([replayed.next_attempt_at])
    (job,) = await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 10)
    got = [(a.attempt, a.status_code) for a in job.history]
    assert got == [(1, 503), (2, 503), (3, 503), (4, 200)], f"got {got}"


async def test_retry_after_is_honoured(env: Env, broker: Broker) -> None:
    statuses = iter([(429, {"Retry-After": "2"}), (200, {})])
    env.receiver.responder = lambda r: (*next(statuses), 0.0)
    await env.put_biz("orders", retry=fast_retry(initial_ms=100))
    await broker.start()
    due = now_ms()
    jobs = await create(env.store, "orders", ["later"], due)
    env.daemon.watch([due])
    env.daemon.run(jobs)
    (job,) = await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 15)
    first, second = (r.at_ms for r in env.receiver.for_job("later"))
    assert second - first >= 2000, f"expected >= 2000 ms after Retry-After: 2, got {second - first}"
    assert job.history[0].status_code == 429


async def test_paused_gets_nothing_until_unpaused(env: Env, broker: Broker) -> None:
    biz = await env.put_biz("orders", paused=True)
    await broker.start()
    due = now_ms()
    jobs = await create(env.store, "orders", [f"p{i}" for i in range(10)], due)
    env.daemon.watch([due])
    await env.daemon.dispatch_once()
    await asyncio.sleep(2)
    assert env.receiver.received == [], f"paused biz type got {len(env.receiver.received)}"
    await env.store.biz_types.put_biz_type(replace(biz, paused=False))
    await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 10)
    assert len(env.receiver.received) == 10


# -- broker processes ----------------------------------------------------------------------


async def test_limits_hold_across_two_broker_processes(env: Env) -> None:
    env.receiver.responder = lambda r: (200, {}, 0.1 if r.path == "/capped" else 0.0)
    await env.put_biz("limited", rate_limit_per_s=20, burst=5)
    await env.put_biz("capped", max_concurrency=2)
    brokers = [env.spawn_broker(), env.spawn_broker()]
    await asyncio.gather(*(b.ready() for b in brokers))
    due = now_ms() + 1500
    jobs = await create(env.store, "limited", [f"l{i}" for i in range(200)], due)
    jobs += await create(env.store, "capped", [f"c{i}" for i in range(40)], due)
    env.daemon.watch([due])
    env.daemon.run([])
    await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 30)
    # Send times are the callbacks' X-Timer-Timestamp (fired_at): arrival times would add
    # the receiver's scheduling jitter to what the contract bounds.
    sent = [int(r.headers["X-Timer-Timestamp"]) / 1000 for r in env.receiver.for_biz("limited")]
    assert len(sent) == 200, f"expected 200 callbacks, got {len(sent)}"
    assert min(sent) * 1000 >= due, f"sent {due - min(sent) * 1000:.0f} ms before due"
    for window_s in (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0):
        allowed = 5 + 20 * (window_s + 0.002)  # ms timestamps, taken just after the token
        got = max_in_window(sent, window_s)
        assert got <= allowed, f"W={window_s}s: expected <= {allowed:.2f} callbacks, got {got}"
    span_s = max(sent) - min(sent)
    assert span_s >= (200 - 5) / 20 - 0.05, f"200 at 20/s burst 5 took only {span_s:.2f}s"
    peak = env.receiver.max_in_flight.get("capped")
    assert peak == 2, f"expected at most (and reaching) 2 in flight, got {peak}"


async def healthy_lateness_ms(
    env: Env, jobs: int, spread_ms: int, hanging: bool, limited: bool = False
) -> list[int]:
    """`jobs` of a healthy biz type due evenly over `spread_ms`, beside a biz type whose
    endpoint hangs (16 callbacks in flight for 30 s) when `hanging`, and beside one
    limited to 10/s holding 60 due jobs when `limited`; their lateness."""

    def answer(r: Received) -> tuple[int, dict[str, str], float]:
        return (200, {}, 30.0) if r.path == "/hangs" else (200, {}, 0.0)

    env.receiver.responder = answer
    await env.put_biz("hangs", timeout_ms=20_000)
    await env.put_biz("healthy", max_concurrency=64)
    broker_proc = env.spawn_broker(grace_s=1)
    await broker_proc.ready()
    if hanging:
        hang_due = now_ms() + 500
        await create(env.store, "hangs", [f"h{i}" for i in range(50)], hang_due)
        env.daemon.watch([hang_due])
        await env.daemon.dispatch_once()
    if limited:
        await env.put_biz("limited", rate_limit_per_s=10, burst=1)
        slow_due = now_ms() + 500
        await create(env.store, "limited", [f"s{i}" for i in range(60)], slow_due)
        env.daemon.watch([slow_due])
        await env.daemon.dispatch_once()
    start = now_ms() + 1800
    due_of = {f"ok{i}": start + i * spread_ms // jobs for i in range(jobs)}
    news = [NewJob("healthy", j, due, json.dumps({"j": j})) for j, due in due_of.items()]
    await env.store.jobs.create_jobs(news, now_ms())
    env.daemon.watch(due_of.values())
    env.daemon.run([])  # claims and publishes up to 1.5 s ahead of the due time
    await wait_for_states(env.store, [("healthy", j) for j in due_of], {JobState.DELIVERED}, 60)
    lateness = sorted(r.at_ms - due_of[r.json["job_id"]] for r in env.receiver.for_biz("healthy"))
    assert len(lateness) == jobs, f"expected {jobs}, got {len(lateness)}"
    assert lateness[0] >= 0, f"early by {-lateness[0]:.1f} ms"
    if hanging:
        held = env.receiver.max_in_flight.get("hangs", 0)
        assert held == 16, f"expected the hanging biz type capped at 16 in flight, got {held}"
    return lateness


async def test_a_rate_limited_biz_does_not_delay_another(env: Env) -> None:
    """Issue 14, item 8: a biz type limited to 10/s holding 60 due jobs (6 s of them)
    takes nothing from another due at the embedded store's nominal load."""
    lateness = await healthy_lateness_ms(env, jobs=150, spread_ms=6000, hanging=False, limited=True)
    assert lateness[int(len(lateness) * 0.99) - 1] < 1000, p99_ms(lateness)
    slow = [("limited", f"s{i}") for i in range(60)]
    await wait_for_states(env.store, slow, {JobState.DELIVERED}, 30)
    sent = sorted(int(r.headers["X-Timer-Timestamp"]) for r in env.receiver.for_biz("limited"))
    assert len(sent) == 60 and (sent[-1] - sent[0]) / 1000 >= 59 / 10 - 0.05, sent[:3]


def p99_ms(lateness: list[int]) -> str:
    p99 = lateness[int(len(lateness) * 0.99) - 1]
    return f"p99 {p99} ms, median {statistics.median(lateness):.0f} ms"


async def test_hanging_biz_does_not_delay_another(env: Env) -> None:
    """Isolation at the embedded store's nominal load (25 fires/s: SecantusDB saturates
    between 25 and 50 on this 2-core machine, docs/operations.md, "Capacity of the
    embedded store"): the hanging biz type's 16 stuck callbacks take nothing from the
    healthy one's."""
    lateness = await healthy_lateness_ms(env, jobs=150, spread_ms=6000, hanging=True)
    assert lateness[int(len(lateness) * 0.99) - 1] < 1000, p99_ms(lateness)


# Known bug (issue 15): the contract's nominal load is 500 jobs due per second, on time
# within 1 s. SecantusDB saturates between 25 and 50 fires/s on this 2-core machine
# (docs/operations.md, "Capacity of the embedded store"): here p99 2.5-5 s. A MongoDB
# server carries it; the embedded store does not. TIMER_KNOWN_BUGS=1 runs it.
@pytest.mark.known_bug
async def test_the_contract_s_nominal_load_on_the_embedded_store(env: Env) -> None:
    lateness = await healthy_lateness_ms(env, jobs=500, spread_ms=1000, hanging=True)
    assert lateness[int(len(lateness) * 0.99) - 1] < 1000, p99_ms(lateness)


async def test_kill_9_during_callbacks_still_delivers_everything(env: Env) -> None:
    env.receiver.responder = lambda r: (200, {}, 0.4)
    await env.put_biz("orders", max_concurrency=8)
    first = env.spawn_broker()
    await first.ready()
    due = now_ms() + 300
    ids = [f"k{i}" for i in range(40)]
    jobs = await create(env.store, "orders", ids, due)
    env.daemon.watch([due])
    await env.daemon.dispatch_once()
    await until(lambda: len(env.receiver.received) >= 12, "12 callbacks")  # 8 in flight
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(5)
    # At-least-once: a job may be called back again only if it was called back before
    # the kill and its outcome was not stored by then (in flight, or answered with the
    # outcome still in the writer's batch).
    called_before = {r.json["job_id"] for r in env.receiver.received}
    stored = {
        job_id
        for job_id in called_before
        if (job := await env.store.jobs.get_job("orders", job_id)) is not None
        and job.state == JobState.DELIVERED
    }
    may_repeat = called_before - stored
    second = env.spawn_broker()
    await second.ready()
    await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 30)
    await asyncio.sleep(0.5)
    counts = {i: len(env.receiver.for_job(i)) for i in ids}
    missing = [i for i, n in counts.items() if n == 0]
    assert not missing, f"never called back: {missing}"
    repeated = {i: n for i, n in counts.items() if n > 1}
    assert set(repeated) <= may_repeat, (
        f"called back again although its outcome was stored before the kill: "
        f"{sorted(set(repeated) - may_repeat)}"
    )
    assert all(n == 2 for n in repeated.values()), f"more than one repeat: {repeated}"
    assert len(may_repeat) <= 16, f"{len(may_repeat)} outcomes unstored at the kill: {may_repeat}"


async def test_sigterm_finishes_in_flight_and_exits_0(env: Env) -> None:
    env.receiver.responder = lambda r: (200, {}, 0.5)
    await env.put_biz("orders", max_concurrency=4)
    proc = env.spawn_broker(grace_s=5)
    await proc.ready()
    due = now_ms() + 300
    jobs = await create(env.store, "orders", [f"t{i}" for i in range(20)], due)
    env.daemon.watch([due])
    await env.daemon.dispatch_once()
    await until(lambda: env.receiver.in_flight.get("orders", 0) >= 4, "4 in flight")
    proc.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.proc.wait, 15)
    assert code == 0, f"expected exit 0, got {code}: {proc.output()}"
    states = [(await env.store.jobs.get_job(b, j)).state for b, j in jobs]  # type: ignore[union-attr]
    sent = len(env.receiver.received)
    delivered = states.count(JobState.DELIVERED)
    assert delivered == sent, f"every callback sent must be recorded: sent {sent}, got {states}"
    depth = await env.queue.queue_depth("orders")
    assert depth == 20 - sent, f"expected the {20 - sent} unsent back in the queue, got {depth}"


@pytest.mark.parametrize(("url_suffix", "expected_s"), [("", 1.0), ("?reconnect_interval=3", 3.0)])
async def test_reconnects_every_second_unless_the_url_says_otherwise(
    url_suffix: str, expected_s: float
) -> None:
    # aio-pika's own default (5 s) added up to 4 s to every RabbitMQ restart.
    queue = AmqpQueue(AMQP_URL.rstrip("/") + "/" + url_suffix, "t")
    await queue.connect()
    try:
        assert queue._connection is not None
        assert queue._connection.reconnect_interval == expected_s  # type: ignore[attr-defined]
    finally:
        await queue.close()
