"""Every public method of both SDK clients against a fake transport: the request it builds
(method, path, query, body) and how it reads the answer. The table must name every
public method of `TimerClient`, so a method added without a case here fails."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.test_client import DUE_AT, FakeServer, biz_type_doc, job_doc
from timer_service.client import (
    AsyncTimerClient,
    AuditEntry,
    BatchItemResult,
    BizStats,
    BizTypeConfig,
    BulkResult,
    Calendar,
    CalendarBucket,
    CreatedToken,
    Job,
    JobPage,
    JobSpec,
    RetryPolicy,
    Schedule,
    SecretRotated,
    Stats,
    TimerClient,
    Token,
)

SCHEDULE: dict[str, Any] = {
    "biz_type": "orders", "schedule_id": "nightly", "cron": "0 3 * * *", "timezone": "UTC",
    "payload": None, "paused": False, "catchup": "skip", "next_run_at": DUE_AT, "runs": 0,
    "last_run_at": None, "last_job_id": None,
}  # fmt: skip
BIZ_STATS: dict[str, Any] = {
    "biz_type": "orders", "paused": False, "rate_limit_per_s": None,
    "counts": {"pending": 3, "dispatched": 0, "delivered": 7, "dead": 1, "cancelled": 0},
    "delivered_last_minute": 2, "failed_last_minute": 0, "lateness_p99_ms": 12,
}  # fmt: skip
AUDIT: dict[str, Any] = {
    "id": "a1", "at": DUE_AT, "actor": "orders-team", "action": "jobs.bulk_cancel",
    "biz_type": "orders", "job_id": None, "filter": {"biz_type": "orders"}, "count": 4,
    "detail": {"done": True},
}  # fmt: skip
BULK: dict[str, Any] = {
    "dry_run": True, "matched": 4, "changed": 0, "next_cursor": None, "operation_id": "op",
}  # fmt: skip
TOKEN: dict[str, Any] = {
    "id": "t1", "name": "orders-team", "role": "producer", "biz_types": ["orders", "refund-*"],
    "created_at": DUE_AT,
}  # fmt: skip
JAN_1 = datetime.fromtimestamp(DUE_AT / 1000, UTC)


@dataclass
class Case:
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    http: str
    path: str
    reply: Any  # the JSON answer (None: 204)
    expected: Any  # what the method returns
    body: Any = None  # the JSON sent (None: no body)
    query: dict[str, list[str]] = field(default_factory=dict)
    status: int = 200


CASES = [
    # Business types
    Case("put_biz_type", ("orders",),
         {"callback_url": "https://o/cb", "burst": 5, "retry": RetryPolicy(max_attempts=3),
          "signing_secret": "s3cret", "paused": False},
         "PUT", "/v1/biz-types/orders", biz_type_doc(), BizTypeConfig(**biz_type_doc()),
         body={"callback_url": "https://o/cb", "burst": 5, "signing_secret": "s3cret",
               "retry": RetryPolicy(max_attempts=3).model_dump(), "paused": False}),
    Case("patch_biz_type", ("orders",), {"rate_limit_per_s": None, "burst": 10},
         "PATCH", "/v1/biz-types/orders", biz_type_doc(burst=10),
         BizTypeConfig(**biz_type_doc(burst=10)), body={"rate_limit_per_s": None, "burst": 10}),
    Case("pause_biz_type", ("orders",), {}, "PATCH", "/v1/biz-types/orders",
         biz_type_doc(paused=True), BizTypeConfig(**biz_type_doc(paused=True)),
         body={"paused": True}),
    Case("resume_biz_type", ("orders",), {}, "PATCH", "/v1/biz-types/orders",
         biz_type_doc(), BizTypeConfig(**biz_type_doc()), body={"paused": False}),
    Case("get_biz_type", ("orders",), {}, "GET", "/v1/biz-types/orders", biz_type_doc(),
         BizTypeConfig(**biz_type_doc())),
    Case("list_biz_types", (), {}, "GET", "/v1/biz-types", {"items": [biz_type_doc()]},
         [BizTypeConfig(**biz_type_doc())]),
    Case("delete_biz_type", ("orders",), {}, "DELETE", "/v1/biz-types/orders", None, None,
         status=204),
    Case("rotate_signing_secret", ("orders",), {"keep_previous_for_s": 3600},
         "POST", "/v1/biz-types/orders/secret:rotate",
         biz_type_doc(has_signing_secret=True, signing_secret="whsec_new"),
         SecretRotated(**biz_type_doc(has_signing_secret=True, signing_secret="whsec_new")),
         body={"keep_previous_for_s": 3600}),
    Case("biz_type_stats", ("orders",), {}, "GET", "/v1/biz-types/orders/stats", BIZ_STATS,
         BizStats(**BIZ_STATS)),
    # Jobs
    Case("create_job", ("orders",),
         {"due_at": JAN_1, "payload": {"order": 42}, "job_id": "order-42",
          "labels": {"tenant": "acme"}, "window_ms": 60_000},
         "POST", "/v1/jobs", job_doc(window_ms=60_000, fire_at=DUE_AT + 17_000),
         Job(**job_doc(window_ms=60_000, fire_at=DUE_AT + 17_000)),
         body={"biz_type": "orders", "job_id": "order-42", "due_at": DUE_AT,
               "payload": {"order": 42}, "labels": {"tenant": "acme"}, "window_ms": 60_000},
         status=201),
    Case("create_jobs",
         ([JobSpec("orders", delay_ms=5, job_id="a", labels={"k": "v"}, window_ms=10),
           {"biz_type": "orders", "due_at": JAN_1, "job_id": "b"}],), {},
         "POST", "/v1/jobs:batch",
         {"results": [{"status": 201, "job": job_doc(job_id="a")},
                      {"status": 409, "error": {"title": "Conflict", "status": 409}}]},
         [BatchItemResult(status=201, job=Job(**job_doc(job_id="a"))),
          BatchItemResult(status=409, error={"title": "Conflict", "status": 409})],
         body={"jobs": [{"biz_type": "orders", "job_id": "a", "delay_ms": 5,
                         "labels": {"k": "v"}, "window_ms": 10},
                        {"biz_type": "orders", "due_at": DUE_AT, "job_id": "b"}]}),
    Case("get_job", ("orders", "order-42"), {}, "GET", "/v1/jobs/orders/order-42", job_doc(),
         Job(**job_doc())),
    Case("cancel_job", ("orders", "order-42"), {}, "DELETE", "/v1/jobs/orders/order-42",
         job_doc(state="cancelled"), Job(**job_doc(state="cancelled"))),
    Case("reschedule_job", ("orders", "order-42"), {"delay_ms": 1000, "payload": [1]},
         "PATCH", "/v1/jobs/orders/order-42", job_doc(payload=[1]), Job(**job_doc(payload=[1])),
         body={"delay_ms": 1000, "payload": [1]}),
    Case("replay_job", ("orders", "order-42"), {}, "POST", "/v1/jobs/orders/order-42/replay",
         job_doc(), Job(**job_doc())),
    Case("list_jobs", ("orders", "dead", 50),
         {"labels": {"tenant": "acme", "region": "eu"}, "job_id_prefix": "order-",
          "due_after": JAN_1, "due_before": DUE_AT + 1},
         "GET", "/v1/jobs", {"items": [job_doc()], "next_cursor": None}, [Job(**job_doc())],
         query={"biz_type": ["orders"], "state": ["dead"], "limit": ["50"],
                "label": ["tenant:acme", "region:eu"], "job_id_prefix": ["order-"],
                "due_after": [str(DUE_AT)], "due_before": [str(DUE_AT + 1)]}),
    Case("list_jobs_page", (), {"state": "pending", "cursor": "orders/a"},
         "GET", "/v1/jobs", {"items": [job_doc()], "next_cursor": "orders/order-42"},
         JobPage(items=(Job(**job_doc()),), next_cursor="orders/order-42"),
         query={"state": ["pending"], "limit": ["100"], "cursor": ["orders/a"]}),
    Case("bulk_cancel", ("orders",), {"labels": {"tenant": "acme"}, "dry_run": True},
         "POST", "/v1/jobs:bulk-cancel", BULK, BulkResult(**BULK),
         body={"filter": {"biz_type": "orders", "labels": {"tenant": "acme"}},
               "dry_run": True}),
    Case("bulk_replay", ("orders",),
         {"state": "dead", "due_before": DUE_AT, "limit": 100, "cursor": "c"},
         "POST", "/v1/jobs:bulk-replay", BULK | {"dry_run": False, "changed": 4},
         BulkResult(**BULK | {"dry_run": False, "changed": 4}),
         body={"filter": {"biz_type": "orders", "state": "dead", "due_before": DUE_AT},
               "dry_run": False, "limit": 100, "cursor": "c"}),
    # Schedules
    Case("put_schedule", ("orders", "nightly"),
         {"cron": "0 3 * * *", "timezone": "UTC", "start_at": JAN_1, "catchup": "one"},
         "PUT", "/v1/schedules/orders/nightly", SCHEDULE, Schedule(**SCHEDULE),
         body={"cron": "0 3 * * *", "timezone": "UTC", "start_at": DUE_AT, "catchup": "one"},
         status=201),
    Case("get_schedule", ("orders", "nightly"), {}, "GET", "/v1/schedules/orders/nightly",
         SCHEDULE, Schedule(**SCHEDULE)),
    Case("delete_schedule", ("orders", "nightly"), {}, "DELETE",
         "/v1/schedules/orders/nightly", None, None, status=204),
    Case("run_schedule_now", ("orders", "nightly"), {}, "POST",
         "/v1/schedules/orders/nightly/run-now", job_doc(), Job(**job_doc()), status=201),
    Case("skip_next_occurrence", ("orders", "nightly"), {}, "POST",
         "/v1/schedules/orders/nightly/skip-next", SCHEDULE, Schedule(**SCHEDULE)),
    Case("list_schedules", ("orders",), {}, "GET", "/v1/schedules", {"items": [SCHEDULE]},
         [Schedule(**SCHEDULE)], query={"biz_type": ["orders"]}),
    # Stats, audit, calendar
    Case("stats", (), {}, "GET", "/v1/stats", {"at": DUE_AT, "items": [BIZ_STATS]},
         Stats(at=DUE_AT, items=(BizStats(**BIZ_STATS),))),
    Case("list_audit", ("orders", "jobs.bulk_cancel"), {}, "GET", "/v1/audit",
         {"items": [AUDIT], "next_cursor": None}, [AuditEntry(**AUDIT)],
         query={"biz_type": ["orders"], "action": ["jobs.bulk_cancel"], "limit": ["100"]}),
    Case("audit_page", (), {"page_size": 10, "cursor": "x"}, "GET", "/v1/audit",
         {"items": [AUDIT], "next_cursor": "y"}, None,
         query={"limit": ["10"], "cursor": ["x"]}),
    Case("calendar", (DUE_AT, DUE_AT + 120_000, 60_000), {"biz_type": "orders"},
         "GET", "/v1/calendar",
         {"step_ms": 60_000, "buckets": [{"at": DUE_AT, "due": 5},
                                         {"at": DUE_AT + 60_000, "due": 0}]},
         Calendar(step_ms=60_000, buckets=(CalendarBucket(at=DUE_AT, due=5),
                                           CalendarBucket(at=DUE_AT + 60_000, due=0))),
         query={"from": [str(DUE_AT)], "to": [str(DUE_AT + 120_000)], "step_ms": ["60000"],
                "biz_type": ["orders"]}),
    # Access tokens
    Case("create_token", ("orders-team", "producer", ["orders", "refund-*"]), {},
         "POST", "/v1/tokens", TOKEN | {"token": "tmr_abc"},
         CreatedToken(**TOKEN | {"token": "tmr_abc"}),
         body={"name": "orders-team", "role": "producer", "biz_types": ["orders", "refund-*"]},
         status=201),
    Case("list_tokens", (), {}, "GET", "/v1/tokens", {"items": [TOKEN]}, [Token(**TOKEN)]),
    Case("delete_token", ("t1",), {}, "DELETE", "/v1/tokens/t1", None, None, status=204),
]  # fmt: skip
NOT_ENDPOINTS = {"close", "with_options"}


def public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction)} - {
        name for name in dir(cls) if name.startswith("_")
    }


def test_every_public_method_has_a_case() -> None:
    covered = {case.method for case in CASES}
    missing = public_methods(TimerClient) - NOT_ENDPOINTS - covered
    assert not missing, f"no request/response case for {sorted(missing)}"


def test_both_clients_have_the_same_methods_and_parameters() -> None:
    assert public_methods(TimerClient) == public_methods(AsyncTimerClient)
    for name in public_methods(TimerClient):
        sync = inspect.signature(getattr(TimerClient, name)).parameters
        aio = inspect.signature(getattr(AsyncTimerClient, name)).parameters
        assert list(sync.values()) == list(aio.values()), f"{name}: {sync} vs {aio}"


def reply_for(case: Case) -> Callable[[httpx.Request], httpx.Response]:
    def reply(request: httpx.Request) -> httpx.Response:
        if case.reply is None:
            return httpx.Response(case.status)
        return httpx.Response(case.status, json=case.reply)

    return reply


def check_request(server: FakeServer, case: Case) -> None:
    [request] = server.requests
    assert (request.method, request.url.path) == (case.http, case.path)
    query = {key: request.url.params.get_list(key) for key in request.url.params}
    assert query == case.query, f"{case.method}: expected query {case.query}, got {query}"
    sent = json.loads(request.content) if request.content else None
    assert sent == case.body, f"{case.method}: expected body {case.body}, got {sent}"


def check_result(case: Case, got: Any) -> None:
    if case.method == "audit_page":
        assert got.next_cursor == "y" and got.items == (AuditEntry(**AUDIT),), got
        return
    assert got == case.expected, f"{case.method}: expected {case.expected}, got {got}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.method)
def test_sync_request_and_answer(case: Case) -> None:
    server = FakeServer().on(case.http, case.path, reply_for(case))
    with server.client() as client:
        got = getattr(client, case.method)(*case.args, **case.kwargs)
        if isinstance(got, Iterator):
            got = list(got)
    check_request(server, case)
    check_result(case, got)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.method)
async def test_async_request_and_answer(case: Case) -> None:
    server = FakeServer().on(case.http, case.path, reply_for(case))
    async with server.async_client() as client:
        got = getattr(client, case.method)(*case.args, **case.kwargs)
        got = [x async for x in got] if isinstance(got, AsyncIterator) else await got
    check_request(server, case)
    check_result(case, got)


def test_a_misspelt_field_is_a_type_error_before_sending() -> None:
    server = FakeServer()
    with server.client() as client:
        with pytest.raises(TypeError, match="brust"):
            client.put_biz_type("orders", callback_url="https://o/cb", brust=3)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="callback_url"):
            client.put_biz_type("orders")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="crn"):
            client.put_schedule("orders", "n", crn="* * * * *")  # type: ignore[call-arg]
    assert server.requests == []


def test_a_bulk_action_needs_a_biz_type() -> None:
    with FakeServer().client() as client, pytest.raises(ValueError, match="biz_type"):
        client.bulk_cancel("", dry_run=True)


def test_the_sdk_reference_lists_every_method() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    section = docs[docs.index("## Python SDK") : docs.index("### Verifying callbacks")]
    listed = set(re.findall(r"^\| `(\w+)\(", section, re.M))
    listed |= set(re.findall(r"`(\w+)\([^`]*\)`", section))
    missing = public_methods(TimerClient) - listed
    assert not missing, f"docs/api.md, Python SDK, does not list {sorted(missing)}"
