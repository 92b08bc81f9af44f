"""Which failed tries the SDK repeats and how long it waits: `Retry-After` honoured on 429
and 503 (seconds or an HTTP date) within the caller's deadline, the same in both clients,
on a fake clock: nothing here sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any

import httpx
import pytest

from tests.unit.test_client import BASE_URL, FakeServer, Reply, job_doc
from timer_service.client import (
    AsyncTimerClient,
    ServerError,
    TimerApiError,
    TimerClient,
    TooManyRequests,
)
from timer_service.client.retry_after import MAX_RETRY_AFTER_S, retry_after_s
from timer_service.client.retrying import RETRY_AFTER_JITTER

JOB = "/v1/jobs/orders/order-42"


class FakeClock:
    """Monotonic seconds that move only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


def shed(status: int = 503, retry_after: str | None = "2", kind: str = "overloaded") -> Reply:
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    body = {"type": f"/problems/{kind}", "title": "Shed", "status": status, "detail": "d"}
    return httpx.Response(status, json=body, headers=headers)


def ok() -> httpx.Response:
    return httpx.Response(200, json=job_doc())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def sync_client(server: FakeServer, clock: FakeClock, **options: Any) -> TimerClient:
    return TimerClient(
        BASE_URL,
        transport=httpx.MockTransport(server),
        sleep=clock.sleep,
        clock=clock,
        **options,
    )


def async_client(server: FakeServer, clock: FakeClock, **options: Any) -> AsyncTimerClient:
    return AsyncTimerClient(
        BASE_URL,
        transport=httpx.MockTransport(server),
        sleep=clock.async_sleep,
        clock=clock,
        **options,
    )


def assert_honoured(sleeps: list[float], asked_s: list[float]) -> None:
    assert len(sleeps) == len(asked_s), f"expected {len(asked_s)} waits, got {sleeps}"
    for slept, asked in zip(sleeps, asked_s, strict=True):
        assert asked <= slept <= asked * (1 + RETRY_AFTER_JITTER), (
            f"asked to wait {asked} s, waited {slept:.3f} s"
        )


# --- Retry-After ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_sync_waits_what_retry_after_asks(clock: FakeClock, status: int) -> None:
    server = FakeServer().on("GET", JOB, shed(status, "2"), shed(status, "1"), ok())
    with sync_client(server, clock) as client:
        assert client.get_job("orders", "order-42").job_id == "order-42"
    assert_honoured(clock.sleeps, [2, 1])


@pytest.mark.parametrize("status", [429, 503])
async def test_async_waits_what_retry_after_asks(clock: FakeClock, status: int) -> None:
    server = FakeServer().on("GET", JOB, shed(status, "2"), shed(status, "1"), ok())
    async with async_client(server, clock) as client:
        assert (await client.get_job("orders", "order-42")).job_id == "order-42"
    assert_honoured(clock.sleeps, [2, 1])


def test_an_http_date_retry_after_is_read(clock: FakeClock) -> None:
    in_10_s = formatdate(time.time() + 10, usegmt=True)
    server = FakeServer().on("GET", JOB, shed(503, in_10_s), ok())
    with sync_client(server, clock) as client:
        client.get_job("orders", "order-42")
    [slept] = clock.sleeps
    assert 8 <= slept <= 10 * (1 + RETRY_AFTER_JITTER), f"expected about 10 s, waited {slept}"


def test_retry_after_answers_are_not_bounded_by_max_attempts(clock: FakeClock) -> None:
    server = FakeServer().on("POST", "/v1/jobs", *[shed(503, "1")] * 6, ok())
    with sync_client(server, clock, max_attempts=2) as client:
        client.create_job("orders", delay_ms=0)
    assert len(server.requests) == 7 and len(clock.sleeps) == 6
    ids = {request.content for request in server.requests}
    assert len(ids) == 1, "every try of a create sends the same body (the same job_id)"


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
async def test_the_deadline_stops_the_retries_before_a_wait_would_pass_it(
    clock: FakeClock, aio: bool
) -> None:
    server = FakeServer().on("GET", JOB, shed(503, "2"))
    with pytest.raises(ServerError) as caught:
        if aio:
            async with async_client(server, clock, retry_deadline_s=7) as client:
                await client.get_job("orders", "order-42")
        else:
            with sync_client(server, clock, retry_deadline_s=7) as client:
                client.get_job("orders", "order-42")
    assert caught.value.retry_after_s == 2
    assert sum(clock.sleeps) <= 7, f"waited {sum(clock.sleeps)} s past a 7 s deadline"
    assert 2 <= len(clock.sleeps) <= 3, clock.sleeps
    assert len(server.requests) == len(clock.sleeps) + 1


def test_a_retry_after_beyond_the_deadline_raises_at_once(clock: FakeClock) -> None:
    server = FakeServer().on("POST", "/v1/jobs", shed(429, "30", kind="over-quota"))
    with sync_client(server, clock, retry_deadline_s=10) as client:
        with pytest.raises(TooManyRequests):
            client.create_job("orders", delay_ms=0)
    assert clock.sleeps == [] and len(server.requests) == 1


def test_with_options_sets_the_deadline_for_some_calls(clock: FakeClock) -> None:
    server = FakeServer().on("GET", JOB, shed(503, "3"), ok(), shed(503, "3"), ok())
    with sync_client(server, clock) as client:
        with pytest.raises(ServerError):
            client.with_options(retry_deadline_s=1).get_job("orders", "order-42")
        assert clock.sleeps == []
        client.get_job("orders", "order-42")  # the client's own deadline: retried
        client.with_options(retry_deadline_s=1).close()  # closes nothing shared
        client.get_job("orders", "order-42")
    assert len(clock.sleeps) == 1 and len(server.requests) == 4


# --- What is repeated ----------------------------------------------------------------------

REPLAY = "/v1/jobs/orders/order-42/replay"


@pytest.mark.parametrize(
    "failure",
    [
        lambda: shed(503, "1", kind="overloaded"),  # the admission gate: refused before any work
        lambda: shed(429, "1", kind="over-quota"),
        lambda: httpx.ConnectError("connection refused"),  # never sent
    ],
    ids=["503-overloaded", "429", "connect-error"],
)
def test_a_call_unsafe_to_repeat_is_repeated_when_nothing_was_done(
    clock: FakeClock, failure: Callable[[], Reply]
) -> None:
    server = FakeServer().on("POST", REPLAY, failure(), ok())
    with sync_client(server, clock) as client:
        client.replay_job("orders", "order-42")
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "failure",
    [
        lambda: shed(503, "1", kind="unavailable"),  # the store did not answer: it may have written
        lambda: shed(502, None, kind="bad-gateway"),
        lambda: httpx.ReadError("connection reset"),
        lambda: httpx.ReadTimeout("read timed out"),
    ],
    ids=["503-store", "502", "read-error", "read-timeout"],
)
@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
async def test_a_call_unsafe_to_repeat_is_not_repeated_after_it_may_have_run(
    clock: FakeClock, failure: Callable[[], Reply], aio: bool
) -> None:
    server = FakeServer().on("POST", REPLAY, failure(), ok())
    with pytest.raises((TimerApiError, httpx.TransportError)):
        if aio:
            async with async_client(server, clock) as client:
                await client.replay_job("orders", "order-42")
        else:
            with sync_client(server, clock) as client:
                client.replay_job("orders", "order-42")
    assert len(server.requests) == 1 and clock.sleeps == []


def test_an_idempotent_call_is_repeated_after_any_transient_failure(clock: FakeClock) -> None:
    failures = [shed(503, "1", kind="unavailable"), shed(502, None), httpx.ReadError("reset")]
    server = FakeServer().on("GET", JOB, *failures, ok())
    with sync_client(server, clock, max_attempts=3) as client:
        client.get_job("orders", "order-42")
    assert len(server.requests) == 4  # 2 without Retry-After: within max_attempts=3


def test_failures_without_retry_after_stop_at_max_attempts(clock: FakeClock) -> None:
    server = FakeServer().on("GET", JOB, httpx.ConnectError("refused"))
    with sync_client(server, clock, max_attempts=3, backoff_s=0.2) as client:
        with pytest.raises(httpx.ConnectError):
            client.get_job("orders", "order-42")
    assert len(server.requests) == 3
    assert all(0 <= s <= 0.2 * 2**i for i, s in enumerate(clock.sleeps)), clock.sleeps


def test_client_errors_are_never_repeated(clock: FakeClock) -> None:
    server = FakeServer().on("GET", JOB, shed(404, "1", kind="not-found"))
    with sync_client(server, clock) as client, pytest.raises(TimerApiError):
        client.get_job("orders", "order-42")
    assert len(server.requests) == 1


# --- Reading the header --------------------------------------------------------------------


def cases() -> Iterator[tuple[str | None, float | None]]:
    now = 1_767_225_600.0
    yield None, None
    yield "3", 3.0
    yield " 1.5 ", 1.5
    yield "-4", 0.0
    yield "soon", None
    yield "nan", None
    yield formatdate(now + 120, usegmt=True), 120.0
    yield formatdate(now - 120, usegmt=True), 0.0
    yield formatdate(now + 60), 60.0  # "-0000" zone: read as GMT
    yield "99999999", MAX_RETRY_AFTER_S


@pytest.mark.parametrize(("header", "expected"), list(cases()))
def test_retry_after_header_values(header: str | None, expected: float | None) -> None:
    got = retry_after_s(header, now_s=1_767_225_600.0)
    assert got == expected, f"Retry-After {header!r}: expected {expected}, got {got}"


# --- Waiting for a connection --------------------------------------------------------------


def test_the_wait_for_a_pooled_connection_is_bounded_by_the_deadline(clock: FakeClock) -> None:
    server = FakeServer().on("GET", JOB, ok())
    with sync_client(server, clock, timeout_s=10, retry_deadline_s=90) as client:
        client.get_job("orders", "order-42")
    timeout = server.requests[0].extensions["timeout"]
    assert (timeout["read"], timeout["pool"]) == (10, 90), timeout


async def test_the_async_client_has_at_most_max_connections_calls_out() -> None:
    out, most = 0, 0

    async def slow_ok(request: httpx.Request) -> httpx.Response:
        nonlocal out, most
        out += 1
        most = max(most, out)
        for _ in range(5):
            await asyncio.sleep(0)  # let the other calls run meanwhile
        out -= 1
        return ok()

    transport = httpx.MockTransport(slow_ok)
    async with AsyncTimerClient(BASE_URL, transport=transport, max_connections=3) as client:
        jobs = await asyncio.gather(*(client.get_job("orders", "order-42") for _ in range(20)))
    assert len(jobs) == 20 and most == 3, f"expected at most 3 calls out at once, saw {most}"
