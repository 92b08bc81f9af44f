"""The SDK clients against an httpx.MockTransport playing the server's side of docs/api.md."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from timer_service.client import (
    AsyncTimerClient,
    BadRequest,
    BatchItemResult,
    BizTypeConfig,
    ClientError,
    ConflictError,
    Job,
    JobSpec,
    NotFoundError,
    PayloadTooLargeError,
    RetryPolicy,
    Schedule,
    ServerError,
    TimerApiError,
    TimerClient,
    Unauthorized,
    ValidationFailed,
)

BASE_URL = "http://timer.test"
DUE_AT = 1_767_225_600_000  # 2026-01-01T00:00:00Z

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def job_doc(biz_type: str = "orders", job_id: str = "order-42", **changes: Any) -> dict[str, Any]:
    doc = {
        "biz_type": biz_type, "job_id": job_id, "due_at": DUE_AT, "payload": {"order": 42},
        "state": "pending", "attempts": 0, "next_attempt_at": DUE_AT,
        "created_at": DUE_AT - 1000, "updated_at": DUE_AT - 1000,
        "delivered_at": None, "last_error": None, "history": [], "labels": {},
    }  # fmt: skip
    return doc | changes


def biz_type_doc(**changes: Any) -> dict[str, Any]:
    doc = {
        "biz_type": "orders", "callback_url": "https://orders.internal/cb",
        "rate_limit_per_s": None, "burst": 1, "max_concurrency": 16, "timeout_ms": 10000,
        "retry": {"max_attempts": 10, "initial_backoff_ms": 1000,
                  "max_backoff_ms": 600000, "multiplier": 2.0},
        "has_signing_secret": False, "paused": False,
    }  # fmt: skip
    return doc | changes


def problem(status: int, title: str = "Error", **extra: Any) -> httpx.Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": "d", **extra}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


class FakeServer:
    """Answers from a queue of replies per (method, path); records every request."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._replies: dict[tuple[str, str], list[Reply]] = {}

    def on(self, method: str, path: str, *replies: Reply) -> FakeServer:
        self._replies.setdefault((method, path), []).extend(replies)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self._replies.get((request.method, request.url.path))
        assert queue, f"unexpected request {request.method} {request.url}"
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, Exception):
            raise reply
        return reply if isinstance(reply, httpx.Response) else reply(request)

    def bodies(self) -> list[Any]:
        return [json.loads(r.content) if r.content else None for r in self.requests]

    def client(self, **kwargs: Any) -> TimerClient:
        return TimerClient(BASE_URL, transport=httpx.MockTransport(self), backoff_s=0, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncTimerClient:
        transport = httpx.MockTransport(self)
        return AsyncTimerClient(BASE_URL, transport=transport, backoff_s=0, **kwargs)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


def connect_error() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


# --- Jobs --------------------------------------------------------------------------------


def test_create_job_sends_the_contract_body_with_bearer_token(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs", httpx.Response(201, json=job_doc()))
    due = datetime(2026, 1, 1, 8, tzinfo=timezone(timedelta(hours=8)))

    with server.client(token="tok") as client:
        job = client.create_job("orders", due_at=due, payload={"order": 42}, job_id="order-42")

    [request] = server.requests
    assert request.headers["authorization"] == "Bearer tok"
    expected = {
        "biz_type": "orders",
        "job_id": "order-42",
        "due_at": DUE_AT,
        "payload": {"order": 42},
    }
    assert server.bodies() == [expected], f"expected {expected}, got {server.bodies()}"
    assert job == Job.model_validate(job_doc())
    assert (job.state, job.next_attempt_at, job.history) == ("pending", DUE_AT, ())


def test_create_job_generates_a_job_id_and_sends_no_auth_without_token(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs", httpx.Response(201, json=job_doc()))

    with server.client() as client:
        client.create_job("orders", delay_ms=500)

    [body] = server.bodies()
    assert set(body) == {"biz_type", "job_id", "delay_ms"}, f"got {body}"
    assert body["delay_ms"] == 500
    assert len(body["job_id"]) == 32 and int(body["job_id"], 16) >= 0, f"got {body['job_id']!r}"
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"due_at": datetime(2026, 1, 1)}, "naive"),
        ({"due_at": DUE_AT, "delay_ms": 5}, "exactly one"),
        ({}, "exactly one"),
    ],
)
def test_create_job_refuses_bad_times_before_sending(
    server: FakeServer, kwargs: dict[str, Any], message: str
) -> None:
    with server.client() as client, pytest.raises(ValueError, match=message):
        client.create_job("orders", **kwargs)
    assert server.requests == []


def test_create_job_retries_a_transport_error_with_the_same_job_id(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs", connect_error(), httpx.Response(200, json=job_doc()))

    with server.client() as client:
        job = client.create_job("orders", due_at=DUE_AT)

    first, second = server.bodies()
    assert first == second, f"retried body differs: {first} vs {second}"
    assert job.job_id == "order-42"


def test_retries_stop_after_max_attempts_with_the_last_error(server: FakeServer) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", connect_error())

    with server.client(max_attempts=3) as client, pytest.raises(httpx.ConnectError):
        client.get_job("orders", "order-42")
    assert len(server.requests) == 3


def test_get_retries_503_then_succeeds(server: FakeServer) -> None:
    ok = httpx.Response(200, json=job_doc())
    server.on("GET", "/v1/jobs/orders/order-42", problem(503), problem(502), ok)

    with server.client() as client:
        assert client.get_job("orders", "order-42").job_id == "order-42"
    assert len(server.requests) == 3


@pytest.mark.parametrize("reply", [httpx.ReadError("connection reset"), problem(503)])
def test_patch_is_not_retried_after_a_failure_that_may_have_done_it(
    server: FakeServer, reply: Reply
) -> None:
    server.on("PATCH", "/v1/jobs/orders/order-42", reply, httpx.Response(200, json=job_doc()))

    with server.client() as client, pytest.raises((httpx.ReadError, ServerError)):
        client.reschedule_job("orders", "order-42", delay_ms=1000)
    assert len(server.requests) == 1, f"expected 1 request, got {len(server.requests)}"


def test_replay_is_never_retried(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs/orders/order-42/replay", problem(504))

    with server.client() as client, pytest.raises(ServerError):
        client.replay_job("orders", "order-42")
    assert len(server.requests) == 1


def test_reschedule_keeps_the_payload_unless_given(server: FakeServer) -> None:
    server.on("PATCH", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))

    with server.client() as client:
        client.reschedule_job("orders", "order-42", due_at=DUE_AT)
        client.reschedule_job("orders", "order-42", delay_ms=0, payload=None)

    expected = [{"due_at": DUE_AT}, {"delay_ms": 0, "payload": None}]
    assert server.bodies() == expected, f"expected {expected}, got {server.bodies()}"


def test_cancel_get_and_replay_hit_the_job_paths(server: FakeServer) -> None:
    path = "/v1/jobs/orders/sched:1767225600000"
    cancelled = job_doc(job_id="sched:1767225600000", state="cancelled", next_attempt_at=None)
    server.on("DELETE", path, httpx.Response(200, json=cancelled))
    server.on("GET", path, httpx.Response(200, json=cancelled))
    server.on("POST", path + "/replay", httpx.Response(200, json=job_doc(state="pending")))

    with server.client() as client:
        assert client.cancel_job("orders", "sched:1767225600000").state == "cancelled"
        assert client.get_job("orders", "sched:1767225600000").next_attempt_at is None
        assert client.replay_job("orders", "sched:1767225600000").state == "pending"

    got = [(r.method, r.url.path, r.content) for r in server.requests]
    assert got == [("DELETE", path, b""), ("GET", path, b""), ("POST", path + "/replay", b"")]


def test_get_job_reads_lateness_typed_and_a_listing_leaves_it_out(server: FakeServer) -> None:
    why = {"kind": "waiting", "late_ms": 5000, "waiting_for": "paused", "detail": "paused"}
    server.on("GET", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc(lateness=why)))
    with server.client() as client:
        lateness = client.get_job("orders", "order-42").lateness
    assert lateness is not None and (lateness.waiting_for, lateness.late_ms) == ("paused", 5000)
    assert "lateness" not in Job.model_validate(job_doc()).model_dump()


def test_list_jobs_follows_next_cursor_over_three_pages(server: FakeServer) -> None:
    pages = iter([
        {"items": [job_doc(job_id="a"), job_doc(job_id="b")], "next_cursor": "c1"},
        {"items": [job_doc(job_id="c")], "next_cursor": "c2"},
        {"items": [job_doc(job_id="d")], "next_cursor": None},
    ])  # fmt: skip
    server.on("GET", "/v1/jobs", lambda request: httpx.Response(200, json=next(pages)))

    with server.client() as client:
        ids = [job.job_id for job in client.list_jobs("orders", state="dead", page_size=2)]

    assert ids == ["a", "b", "c", "d"]
    got = [dict(r.url.params) for r in server.requests]
    base = {"biz_type": "orders", "state": "dead", "limit": "2"}
    expected = [base, base | {"cursor": "c1"}, base | {"cursor": "c2"}]
    assert got == expected, f"expected {expected}, got {got}"


def batch_reply(request: httpx.Request) -> httpx.Response:
    """201 for each item, except a 422 problem for items whose payload is "bad"."""
    results = [
        {"status": 422, "error": {"title": "invalid", "status": 422}}
        if item.get("payload") == "bad"
        else {"status": 201, "job": job_doc(job_id=item["job_id"], payload=item.get("payload"))}
        for item in json.loads(request.content)["jobs"]
    ]
    return httpx.Response(200, json={"results": results})


def test_create_jobs_chunks_2500_items_into_3_batches_in_order(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply)
    items = [{"biz_type": "orders", "delay_ms": 0, "payload": i} for i in range(2500)]

    with server.client() as client:
        results = list(client.create_jobs(items))

    sizes = [len(body["jobs"]) for body in server.bodies()]
    assert sizes == [1000, 1000, 500], f"expected [1000, 1000, 500], got {sizes}"
    assert [r.job.payload for r in results if r.job] == list(range(2500))
    sent = [item for body in server.bodies() for item in body["jobs"]]
    assert all(item["job_id"] for item in sent), "every item carries a job_id"


def test_create_jobs_reports_each_item_and_takes_job_specs(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply)
    due = datetime.fromtimestamp(DUE_AT / 1000, UTC)
    specs = [JobSpec("orders", due_at=due, job_id="x"), {"biz_type": "orders", "payload": "bad"}]

    with server.client() as client:
        first, second = client.create_jobs(specs)

    assert server.bodies()[0]["jobs"][0] == {"biz_type": "orders", "job_id": "x", "due_at": DUE_AT}
    assert first.ok and first.job is not None and first.job.job_id == "x"
    expected = BatchItemResult(status=422, error={"title": "invalid", "status": 422})
    assert second == expected, f"expected {expected}, got {second}"
    assert not second.ok


def test_create_jobs_retries_a_batch_with_the_same_job_ids(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", problem(503), batch_reply)

    with server.client() as client:
        results = list(client.create_jobs([{"biz_type": "orders", "delay_ms": 0}]))

    first, second = server.bodies()
    assert first == second, f"retried batch differs: {first} vs {second}"
    assert [r.status for r in results] == [201]


# --- Errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, BadRequest),
        (401, Unauthorized),
        (404, NotFoundError),
        (409, ConflictError),
        (413, PayloadTooLargeError),
        (422, ValidationFailed),
        (418, ClientError),
        (500, ServerError),
    ],
)
def test_error_statuses_map_to_exception_types(
    server: FakeServer, status: int, error_type: type[TimerApiError]
) -> None:
    errors = [{"loc": ["body", "due_at"], "msg": "beyond the horizon"}]
    server.on("POST", "/v1/jobs", problem(status, "Nope", errors=errors))

    with server.client() as client, pytest.raises(TimerApiError) as caught:
        client.create_job("orders", delay_ms=1)

    assert type(caught.value) is error_type, f"expected {error_type}, got {type(caught.value)}"
    assert caught.value.status == status
    assert caught.value.problem["errors"] == errors
    assert "Nope" in str(caught.value)


def test_a_non_json_error_body_still_gives_a_problem(server: FakeServer) -> None:
    server.on("GET", "/v1/biz-types/orders", httpx.Response(502, text="<html>bad gateway</html>"))

    with server.client(max_attempts=2) as client, pytest.raises(ServerError) as caught:
        client.get_biz_type("orders")

    assert caught.value.problem["status"] == 502
    assert "bad gateway" in caught.value.problem["detail"]
    assert len(server.requests) == 2


# --- Biz types and schedules -------------------------------------------------------------


def test_put_biz_type_sends_the_config(server: FakeServer) -> None:
    stored = biz_type_doc(rate_limit_per_s=100.0, has_signing_secret=True)
    server.on("PUT", "/v1/biz-types/orders", httpx.Response(201, json=stored))

    with server.client() as client:
        config = client.put_biz_type(
            "orders",
            callback_url="https://orders.internal/cb",
            rate_limit_per_s=100.0,
            retry=RetryPolicy(max_attempts=3),
            signing_secret="s3cret",
        )

    expected = {
        "callback_url": "https://orders.internal/cb",
        "rate_limit_per_s": 100.0,
        "retry": {"max_attempts": 3, "initial_backoff_ms": 1000, "max_backoff_ms": 600000,
                  "multiplier": 2.0},
        "signing_secret": "s3cret",
    }  # fmt: skip
    assert server.bodies() == [expected], f"expected {expected}, got {server.bodies()}"
    assert config == BizTypeConfig.model_validate(stored)
    assert config.has_signing_secret and config.retry.max_attempts == 10


def test_get_list_and_delete_biz_types(server: FakeServer) -> None:
    server.on("GET", "/v1/biz-types", httpx.Response(200, json={"items": [biz_type_doc()]}))
    server.on("GET", "/v1/biz-types/nope", problem(404))
    server.on("DELETE", "/v1/biz-types/orders", httpx.Response(204))

    with server.client() as client:
        assert [b.biz_type for b in client.list_biz_types()] == ["orders"]
        with pytest.raises(NotFoundError):
            client.get_biz_type("nope")
        client.delete_biz_type("orders")


def test_a_retried_delete_that_finds_nothing_has_succeeded(server: FakeServer) -> None:
    server.on("DELETE", "/v1/biz-types/orders", problem(504), problem(404))

    with server.client() as client:
        client.delete_biz_type("orders")
    assert len(server.requests) == 2


def test_delete_biz_type_with_active_jobs_is_a_conflict(server: FakeServer) -> None:
    server.on("DELETE", "/v1/biz-types/orders", problem(409))

    with server.client() as client, pytest.raises(ConflictError):
        client.delete_biz_type("orders")


def test_schedules(server: FakeServer) -> None:
    path = "/v1/schedules/orders/nightly"
    doc = {"biz_type": "orders", "schedule_id": "nightly", "cron": "0 3 * * *",
           "timezone": "Europe/Berlin", "payload": None, "paused": False, "catchup": "skip",
           "next_run_at": DUE_AT, "runs": 0, "last_run_at": None, "last_job_id": None}  # fmt: skip
    server.on("PUT", path, httpx.Response(201, json=doc))
    server.on("GET", path, httpx.Response(200, json=doc))
    server.on("DELETE", path, httpx.Response(204))
    server.on("GET", "/v1/schedules", httpx.Response(200, json={"items": [doc]}))
    start = datetime.fromtimestamp(DUE_AT / 1000, UTC)

    with server.client() as client:
        put = client.put_schedule(
            "orders", "nightly", cron="0 3 * * *", timezone="Europe/Berlin", start_at=start
        )
        assert put == Schedule.model_validate(doc) == client.get_schedule("orders", "nightly")
        assert client.list_schedules("orders") == [put]
        client.delete_schedule("orders", "nightly")

    assert server.bodies()[0] == {
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "start_at": DUE_AT,
    }
    assert dict(server.requests[2].url.params) == {"biz_type": "orders"}


# --- Async client ------------------------------------------------------------------------


async def test_async_client_creates_lists_and_maps_errors(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs", connect_error(), httpx.Response(201, json=job_doc()))
    pages = iter([
        {"items": [job_doc(job_id="a")], "next_cursor": "n"},
        {"items": [job_doc(job_id="b")], "next_cursor": None},
    ])  # fmt: skip
    server.on("GET", "/v1/jobs", lambda request: httpx.Response(200, json=next(pages)))
    server.on("GET", "/v1/jobs/orders/gone", problem(404))

    async with server.async_client(token="tok") as client:
        job = await client.create_job("orders", delay_ms=10, payload={"order": 42})
        listed = [j.job_id async for j in client.list_jobs()]
        with pytest.raises(NotFoundError):
            await client.get_job("orders", "gone")

    assert job.job_id == "order-42"
    assert listed == ["a", "b"]
    first, second = server.bodies()[:2]
    assert first == second, f"retried body differs: {first} vs {second}"
    assert all(r.headers["authorization"] == "Bearer tok" for r in server.requests)


async def test_async_create_jobs_chunks_and_patch_is_not_retried(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply)
    server.on("PATCH", "/v1/jobs/orders/a", httpx.ReadError("connection reset"))

    async with server.async_client() as client:
        results = [
            r
            async for r in client.create_jobs(
                {"biz_type": "orders", "delay_ms": 0} for _ in range(1001)
            )
        ]
        with pytest.raises(httpx.ReadError):
            await client.reschedule_job("orders", "a", delay_ms=5)

    assert [len(body["jobs"]) for body in server.bodies()[:2]] == [1000, 1]
    assert len(results) == 1001
    assert [r.method for r in server.requests].count("PATCH") == 1
