"""The REST API over the in-memory store: every endpoint and status of docs/api.md."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest

from tests.contract.stores import list_jobs
from timer_service.api import create_app
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.metrics import Metrics
from timer_service.model import Attempt
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

NOW = 1_767_225_600_000  # FakeClock's start: 2026-01-01T00:00:00Z
CALLBACK = {"callback_url": "http://127.0.0.1:9000/cb"}


# -- harness ------------------------------------------------------------------


class Api:
    """An app over a MemoryStore, a FakeClock and a fresh registry, with an HTTP client."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        store: MemoryStore,
        clock: FakeClock,
        metrics: Metrics,
        written: list[list[int]],
    ) -> None:
        self.client = client
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.written = written

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return await self.client.request(method, url, **kw)

    async def put_biz(self, name: str = "orders", **config: Any) -> httpx.Response:
        return await self.request("PUT", f"/v1/biz-types/{name}", json={**CALLBACK, **config})

    async def create(self, **body: Any) -> httpx.Response:
        return await self.request("POST", "/v1/jobs", json=body)

    async def snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        biz = [b.to_public() for b in await self.store.biz_types.list_biz_types()]
        jobs, _ = await list_jobs(self.store, None, None, 1000, None)
        return biz, [j.to_public() for j in jobs]

    def created_total(self, biz_type: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "timer_jobs_created_total", {"biz_type": biz_type}
        )
        return value or 0.0


ApiFactory = Callable[..., AsyncIterator[Api]]


@pytest.fixture
async def make_api() -> AsyncIterator[Callable[..., Any]]:
    clients: list[httpx.AsyncClient] = []

    async def make(store: Any = None, ready_checks: Sequence[Any] = (), **settings: Any) -> Api:
        if store is None:
            store = recording(MemoryStore(buckets=60, retention_ms=86_400_000))
        await store.setup()
        clock = FakeClock(NOW)
        metrics = Metrics()
        written: list[list[int]] = []
        app = create_app(
            Settings(_env_file=None, **settings),  # type: ignore[call-arg]
            store,
            metrics,
            clock,
            on_jobs_written=lambda seconds: written.append(list(seconds)),
            ready_checks=ready_checks,
        )
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://api")
        clients.append(client)
        return Api(client, store, clock, metrics, written)

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
async def api(make_api: Callable[..., Any]) -> Api:
    api = await make_api()
    assert (await api.put_biz()).status_code == 201
    return api


def expect(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, (
        f"{response.request.method} {response.request.url}: expected {status}, "
        f"got {response.status_code}: {response.text[:500]}"
    )
    if status == 204:
        assert response.content == b"", f"expected an empty body, got {response.text!r}"
        return None
    if status >= 400:
        return expect_problem(response, status)
    return response.json()


def expect_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith("application/problem+json"), (
        f"expected application/problem+json, got {content_type!r}"
    )
    body = response.json()
    assert {"type", "title", "status", "detail"} <= body.keys(), f"not a problem: {body}"
    assert body["status"] == status, f"expected status {status} in body, got {body}"
    if status == 422:
        assert body["errors"], f"422 without errors: {body}"
        for error in body["errors"]:
            assert isinstance(error["loc"], list) and isinstance(error["msg"], str), error
    return body


def locs(problem: dict[str, Any]) -> list[list[Any]]:
    return [e["loc"] for e in problem.get("errors", [])]


async def finish(store: MemoryStore, biz_type: str, job_id: str, kind: OutcomeKind) -> None:
    """Drive a job through claim and one callback outcome, as daemon and broker would."""
    job = await store.jobs.get_job(biz_type, job_id)
    assert job is not None and job.next_attempt_at is not None
    second = job.next_attempt_at // 1000
    claimed = await store.dispatch.claim_due(second, job.next_attempt_at, "c1", 1, NOW)
    assert [c.job_id for c in claimed] == [job_id], f"claim failed: {claimed}"
    attempt = Attempt(1, NOW, 500 if kind != OutcomeKind.DELIVERED else 200, None, 3)
    ref = SendRef(biz_type, job_id, second, "c1")
    await store.outcomes.record_outcomes([Outcome(ref, kind, attempt)], NOW)


async def dispatch(store: MemoryStore, biz_type: str, job_id: str) -> None:
    job = await store.jobs.get_job(biz_type, job_id)
    assert job is not None and job.next_attempt_at is not None
    claimed = await store.dispatch.claim_due(
        job.next_attempt_at // 1000, job.next_attempt_at, "c1", 1, NOW
    )
    assert claimed, "claim failed"


# -- biz types -----------------------------------------------------------------


async def test_put_biz_type_creates_with_defaults(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    body = expect(await api.put_biz("orders"), 201)
    assert body == {
        "biz_type": "orders",
        "callback_url": CALLBACK["callback_url"],
        "rate_limit_per_s": None,
        "burst": 1,
        "max_concurrency": 16,
        "timeout_ms": 10000,
        "retry": {
            "max_attempts": 10,
            "initial_backoff_ms": 1000,
            "max_backoff_ms": 600000,
            "multiplier": 2.0,
        },
        "has_signing_secret": False,
        "signing_secret_rotating_until": None,
        "paused": False,
        "registration_rate_per_s": None,
        "registration_burst": None,
        "created_at": NOW,
        "updated_at": NOW,
    }


async def test_put_biz_type_replaces_keeps_created_at_and_hides_secret(api: Api) -> None:
    api.clock.advance(5000)
    full = {
        "callback_url": "https://10.0.0.7/hook",
        "rate_limit_per_s": 100.0,
        "burst": 10,
        "max_concurrency": 32,
        "timeout_ms": 5000,
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 0,
            "max_backoff_ms": 10,
            "multiplier": 1,
        },
        "signing_secret": "s3cret",
        "paused": True,
    }
    response = await api.request("PUT", "/v1/biz-types/orders", json=full)
    body = expect(response, 200)
    assert "s3cret" not in response.text, f"secret leaked: {response.text}"
    assert body["has_signing_secret"] is True
    assert body["created_at"] == NOW and body["updated_at"] == NOW + 5000, body
    for key in (
        "callback_url",
        "rate_limit_per_s",
        "burst",
        "max_concurrency",
        "timeout_ms",
        "paused",
    ):
        assert body[key] == full[key], f"{key}: expected {full[key]!r}, got {body[key]!r}"
    assert body["retry"]["multiplier"] == 1.0
    stored = await api.store.biz_types.get_biz_type("orders")
    assert stored is not None and stored.signing_secret == "s3cret"
    got = expect(await api.request("GET", "/v1/biz-types/orders"), 200)
    assert got == body
    listed = expect(await api.request("GET", "/v1/biz-types"), 200)
    assert listed == {"items": [body]}, listed


async def test_get_unknown_biz_type_is_404(api: Api) -> None:
    expect(await api.request("GET", "/v1/biz-types/nope"), 404)


async def test_delete_biz_type(api: Api) -> None:
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)
    expect(await api.request("GET", "/v1/biz-types/orders"), 404)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 404)
    assert expect(await api.request("GET", "/v1/biz-types"), 200) == {"items": []}


async def test_delete_biz_type_with_active_jobs_is_409(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    before = await api.snapshot()
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 409)
    assert await api.snapshot() == before
    expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)


BAD_BIZ_BODIES = [
    ({}, ["body", "callback_url"]),
    ({"callback_url": "ftp://x/y"}, ["body", "callback_url"]),
    ({"callback_url": "not a url"}, ["body", "callback_url"]),
    ({"callback_url": 5}, ["body", "callback_url"]),
    # URLs the notifier could never send to (they once left jobs stuck dispatched):
    ({"callback_url": "http://orders..internal/cb"}, ["body", "callback_url"]),
    ({"callback_url": f"http://{'a' * 64}.internal/cb"}, ["body", "callback_url"]),
    ({"callback_url": "http://orders.internal:0/cb"}, ["body", "callback_url"]),
    ({"callback_url": "http://orders.internal/c\u0000b"}, ["body", "callback_url"]),
    ({**CALLBACK, "rate_limit_per_s": 0}, ["body", "rate_limit_per_s"]),
    ({**CALLBACK, "rate_limit_per_s": "10"}, ["body", "rate_limit_per_s"]),
    ({**CALLBACK, "burst": 0}, ["body", "burst"]),
    ({**CALLBACK, "burst": True}, ["body", "burst"]),
    ({**CALLBACK, "burst": 1.5}, ["body", "burst"]),
    ({**CALLBACK, "max_concurrency": 0}, ["body", "max_concurrency"]),
    ({**CALLBACK, "timeout_ms": 0}, ["body", "timeout_ms"]),
    ({**CALLBACK, "retry": {"max_attempts": 0}}, ["body", "retry", "max_attempts"]),
    ({**CALLBACK, "retry": {"initial_backoff_ms": -1}}, ["body", "retry", "initial_backoff_ms"]),
    ({**CALLBACK, "retry": {"max_backoff_ms": -1}}, ["body", "retry", "max_backoff_ms"]),
    ({**CALLBACK, "retry": {"multiplier": 0.5}}, ["body", "retry", "multiplier"]),
    ({**CALLBACK, "retry": 3}, ["body", "retry"]),
    ({**CALLBACK, "paused": "yes"}, ["body", "paused"]),
    ({**CALLBACK, "signing_secret": 42}, ["body", "signing_secret"]),
    ([CALLBACK], ["body"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD_BIZ_BODIES)
async def test_put_biz_type_rejects_bad_config(api: Api, body: Any, loc: list[Any]) -> None:
    before = await api.snapshot()
    problem = expect(await api.request("PUT", "/v1/biz-types/orders", json=body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a rejected request changed the store"


@pytest.mark.parametrize("name", ["Orders", "-x", "a" * 65, "a b", "a.b%0A"])
async def test_bad_biz_type_in_path_is_422(api: Api, name: str) -> None:
    before = await api.snapshot()
    problem = expect(await api.put_biz(name), 422)
    assert ["path", "biz_type"] in locs(problem), locs(problem)
    expect(await api.request("GET", f"/v1/biz-types/{name}"), 422)
    expect(await api.request("DELETE", f"/v1/biz-types/{name}"), 422)
    assert await api.snapshot() == before


async def test_loopback_and_private_callback_urls_are_allowed(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    for i, url in enumerate(["http://localhost:8000", "http://192.168.1.2/x", "https://[::1]/"]):
        expect(await api.request("PUT", f"/v1/biz-types/b{i}", json={"callback_url": url}), 201)


# -- create --------------------------------------------------------------------


async def test_create_with_due_at(api: Api) -> None:
    response = await api.create(
        biz_type="orders", job_id="order-42", due_at=NOW + 60_000, payload={"order": 42}
    )
    job = expect(response, 201)
    assert response.headers["location"] == "/v1/jobs/orders/order-42"
    assert job == {
        "biz_type": "orders",
        "job_id": "order-42",
        "due_at": NOW + 60_000,
        "payload": {"order": 42},
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": NOW + 60_000,
        "created_at": NOW,
        "updated_at": NOW,
        "delivered_at": None,
        "last_error": None,
        "history": [],
        "labels": {},
    }
    assert api.created_total("orders") == 1.0
    assert api.written == [[(NOW + 60_000) // 1000]]
    assert expect(await api.request("GET", "/v1/jobs/orders/order-42"), 200) == job


async def test_create_with_delay_counts_from_server_clock(api: Api) -> None:
    api.clock.advance(123)
    job = expect(await api.create(biz_type="orders", job_id="d", delay_ms=5000), 201)
    assert job["due_at"] == NOW + 123 + 5000, job
    assert job["payload"] is None


async def test_create_without_job_id_generates_one(api: Api) -> None:
    first = expect(await api.create(biz_type="orders", delay_ms=0), 201)
    second = expect(await api.create(biz_type="orders", delay_ms=0), 201)
    assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", first["job_id"]), first["job_id"]
    assert first["job_id"] != second["job_id"]


async def test_create_is_idempotent(api: Api) -> None:
    body = {"biz_type": "orders", "job_id": "a", "due_at": NOW + 1000, "payload": {"x": [1, 2]}}
    first = expect(await api.create(**body), 201)
    api.clock.advance(10)
    again = await api.create(**body)
    assert expect(again, 200) == first
    assert "location" not in again.headers or again.headers["location"]
    expect(await api.create(**{**body, "payload": {"x": [1, 3]}}), 409)
    expect(await api.create(**{**body, "due_at": NOW + 1001}), 409)
    expect(await api.create(**{k: v for k, v in body.items() if k != "payload"}), 409)
    assert api.created_total("orders") == 1.0
    assert len(api.written) == 1, f"only the 201 nudges the daemon: {api.written}"


async def test_rfc3339_and_epoch_ms_of_one_instant_are_equal(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="t", due_at=NOW + 1500), 201)
    for same in (
        "2026-01-01T00:00:01.500Z",
        "2026-01-01T01:00:01.5+01:00",
        "2025-12-31T19:00:01.500-05:00",
    ):
        expect(await api.create(biz_type="orders", job_id="t", due_at=same), 200)
    expect(await api.create(biz_type="orders", job_id="t", due_at="2026-01-01T00:00:01Z"), 409)


async def test_absent_payload_equals_null(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="n", due_at=NOW), 201)
    expect(await api.create(biz_type="orders", job_id="n", due_at=NOW, payload=None), 200)


async def test_delay_ms_retry_compares_payload_only(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="d", delay_ms=1000, payload=[1]), 201)
    api.clock.advance(700)
    job = expect(await api.create(biz_type="orders", job_id="d", delay_ms=9000, payload=[1]), 200)
    assert job["due_at"] == NOW + 1000, "the existing job is returned unchanged"
    expect(await api.create(biz_type="orders", job_id="d", delay_ms=1000, payload=[2]), 409)


async def test_same_create_returns_existing_job_whatever_its_state(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="c", due_at=NOW), 201)
    expect(await api.request("DELETE", "/v1/jobs/orders/c"), 200)
    job = expect(await api.create(biz_type="orders", job_id="c", due_at=NOW), 200)
    assert job["state"] == "cancelled"


async def test_past_due_is_accepted(api: Api) -> None:
    job = expect(await api.create(biz_type="orders", job_id="p", due_at=NOW - 86_400_000), 201)
    assert job["next_attempt_at"] == NOW - 86_400_000


async def test_horizon(make_api: Callable[..., Any]) -> None:
    api = await make_api(horizon_days=1)
    expect(await api.put_biz(), 201)
    day = 86_400_000
    expect(await api.create(biz_type="orders", job_id="edge", due_at=NOW + day), 201)
    before = await api.snapshot()
    problem = expect(await api.create(biz_type="orders", job_id="far", due_at=NOW + day + 1), 422)
    assert ["body", "due_at"] in locs(problem)
    problem = expect(await api.create(biz_type="orders", job_id="far", delay_ms=day + 1), 422)
    assert ["body", "delay_ms"] in locs(problem)
    assert await api.snapshot() == before


async def test_default_horizon_is_3650_days(api: Api) -> None:
    horizon = 3650 * 86_400_000
    expect(await api.create(biz_type="orders", job_id="ok", delay_ms=horizon), 201)
    expect(await api.create(biz_type="orders", job_id="no", delay_ms=horizon + 1), 422)


async def test_unknown_biz_type_is_422(api: Api) -> None:
    before = await api.snapshot()
    problem = expect(await api.create(biz_type="nope", job_id="a", delay_ms=1), 422)
    assert ["body", "biz_type"] in locs(problem)
    assert await api.snapshot() == before


async def test_payload_size_limit(api: Api) -> None:
    limit = 65536
    at_limit = "x" * (limit - 2)  # the quotes make it exactly the limit
    expect(await api.create(biz_type="orders", job_id="fits", delay_ms=1, payload=at_limit), 201)
    before = await api.snapshot()
    expect(
        await api.create(biz_type="orders", job_id="big", delay_ms=1, payload=at_limit + "x"), 413
    )
    # The limit is on the UTF-8 bytes, not characters.
    expect(
        await api.create(biz_type="orders", job_id="big", delay_ms=1, payload="é" * (limit // 2)),
        413,
    )
    assert await api.snapshot() == before


BAD_JOB_BODIES = [
    ({"biz_type": "orders", "job_id": "a"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": NOW, "delay_ms": 5}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": True}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": 1.5}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": -1}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-01-01T00:00:00"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-01-01"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "tomorrow"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-13-01T00:00:00Z"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": [NOW]}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": -1}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": "5"}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": False}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a b", "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": "x" * 129, "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": "", "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": 7, "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "Orders", "job_id": "a", "delay_ms": 1}, ["body", "biz_type"]),
    ({"job_id": "a", "delay_ms": 1}, ["body", "biz_type"]),
    ([{"biz_type": "orders", "delay_ms": 1}], ["body"]),
    ("orders", ["body"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD_JOB_BODIES)
async def test_create_rejects_bad_input(api: Api, body: Any, loc: list[Any]) -> None:
    before = await api.snapshot()
    problem = expect(await api.request("POST", "/v1/jobs", json=body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a rejected request changed the store"
    assert api.created_total("orders") == 0.0


# -- read, cancel, reschedule, replay ----------------------------------------------


async def test_get_unknown_job_is_404(api: Api) -> None:
    expect(await api.request("GET", "/v1/jobs/orders/none"), 404)


@pytest.mark.parametrize(
    "path", ["/v1/jobs/Orders/a", "/v1/jobs/orders/a%20b", f"/v1/jobs/orders/{'x' * 129}"]
)
async def test_bad_identity_in_path_is_422(api: Api, path: str) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    before = await api.snapshot()
    for method in ("GET", "DELETE"):
        expect(await api.request(method, path), 422)
    expect(await api.request("PATCH", path, json={"delay_ms": 5}), 422)
    expect(await api.request("POST", f"{path}/replay"), 422)
    assert await api.snapshot() == before


async def test_cancel(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    api.clock.advance(10)
    job = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    assert job["state"] == "cancelled" and job["next_attempt_at"] is None, job
    assert job["updated_at"] == NOW + 10
    again = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    assert again["state"] == "cancelled"
    expect(await api.request("DELETE", "/v1/jobs/orders/none"), 404)


async def test_cancel_dispatched_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    assert expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)["state"] == "cancelled"


async def test_cancel_once_the_callback_started_is_409_in_flight(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    ref = SendRef("orders", "a", NOW // 1000, "c1")
    assert await api.store.outcomes.start_sending([ref], "send-1", NOW)
    before = await api.snapshot()
    problem = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 409)
    assert problem["type"].endswith("/callback-in-flight"), problem
    assert await api.snapshot() == before


@pytest.mark.parametrize("kind", [OutcomeKind.DELIVERED, OutcomeKind.DEAD])
async def test_cancel_final_job_is_409(api: Api, kind: OutcomeKind) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", kind)
    before = await api.snapshot()
    expect(await api.request("DELETE", "/v1/jobs/orders/a"), 409)
    assert await api.snapshot() == before


async def test_reschedule_pending_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW + 5000, payload=1), 201)
    api.written.clear()
    job = expect(await api.request("PATCH", "/v1/jobs/orders/a", json={"due_at": NOW + 9000}), 200)
    assert (job["due_at"], job["next_attempt_at"], job["payload"]) == (NOW + 9000, NOW + 9000, 1)
    job = expect(
        await api.request(
            "PATCH", "/v1/jobs/orders/a", json={"delay_ms": 100, "payload": {"new": True}}
        ),
        200,
    )
    assert (job["due_at"], job["payload"]) == (NOW + 100, {"new": True}), job
    job = expect(
        await api.request(
            "PATCH", "/v1/jobs/orders/a", json={"due_at": "2026-01-01T00:00:02Z", "payload": None}
        ),
        200,
    )
    assert (job["due_at"], job["payload"]) == (NOW + 2000, None), job
    assert api.written == [[NOW // 1000 + 9], [NOW // 1000], [NOW // 1000 + 2]], api.written


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 422),
        ({"due_at": NOW, "delay_ms": 1}, 422),
        ({"delay_ms": -5}, 422),
        ({"due_at": "2026-01-01T00:00:00"}, 422),
        ({"delay_ms": 3650 * 86_400_000 + 1}, 422),
        ({"delay_ms": 1, "payload": "x" * 70_000}, 413),
        ([1], 422),
    ],
)
async def test_reschedule_rejects_bad_input(api: Api, body: Any, status: int) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW + 5000), 201)
    before = await api.snapshot()
    expect(await api.request("PATCH", "/v1/jobs/orders/a", json=body), status)
    assert await api.snapshot() == before


async def test_reschedule_unknown_is_404_and_not_pending_is_409(api: Api) -> None:
    expect(await api.request("PATCH", "/v1/jobs/orders/none", json={"delay_ms": 1}), 404)
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    before = await api.snapshot()
    expect(await api.request("PATCH", "/v1/jobs/orders/a", json={"delay_ms": 1}), 409)
    assert await api.snapshot() == before


async def test_replay_dead_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", OutcomeKind.DEAD)
    api.clock.advance(60_000)
    api.written.clear()
    job = expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 200)
    assert job["state"] == "pending" and job["next_attempt_at"] == NOW + 60_000, job
    assert job["attempts"] == 1 and len(job["history"]) == 1, job
    assert api.written == [[(NOW + 60_000) // 1000]]
    api.clock.advance(500)  # a retry of a replay whose answer was lost: the same job
    again = expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 200)
    assert again == job, f"a retried replay changed the job:\n{again}\n!=\n{job}"
    expect(await api.request("POST", "/v1/jobs/orders/none/replay"), 404)


async def test_replay_delivered_job_is_409(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", OutcomeKind.DELIVERED)
    job = expect(await api.request("GET", "/v1/jobs/orders/a"), 200)
    assert job["state"] == "delivered" and job["history"][0]["status_code"] == 200, job
    expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 409)


# -- list ------------------------------------------------------------------------


async def test_list_pages_and_filters(api: Api) -> None:
    expect(await api.put_biz("billing"), 201)
    for i in range(5):
        expect(await api.create(biz_type="orders", job_id=f"o{i}", delay_ms=1000), 201)
    expect(await api.create(biz_type="billing", job_id="b0", delay_ms=1000), 201)
    expect(await api.request("DELETE", "/v1/jobs/orders/o3"), 200)

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"biz_type": "orders", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = expect(await api.request("GET", "/v1/jobs", params=params), 200)
        assert len(page["items"]) <= 2
        seen += [job["job_id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["o0", "o1", "o2", "o3", "o4"], seen

    everything = expect(await api.request("GET", "/v1/jobs"), 200)
    assert len(everything["items"]) == 6 and everything["next_cursor"] is None, everything
    cancelled = expect(await api.request("GET", "/v1/jobs", params={"state": "cancelled"}), 200)
    assert [j["job_id"] for j in cancelled["items"]] == ["o3"], cancelled
    full = expect(await api.request("GET", "/v1/jobs", params={"limit": 1000}), 200)
    assert len(full["items"]) == 6


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"limit": 1001}, ["query", "limit"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": "many"}, ["query", "limit"]),
        ({"state": "done"}, ["query", "state"]),
        ({"biz_type": "Bad!"}, ["query", "biz_type"]),
    ],
)
async def test_list_rejects_bad_query(api: Api, params: dict[str, Any], loc: list[Any]) -> None:
    problem = expect(await api.request("GET", "/v1/jobs", params=params), 422)
    assert loc in locs(problem), locs(problem)


# -- health and metrics -------------------------------------------------------------


async def test_health_ready_metrics(api: Api) -> None:
    assert expect(await api.request("GET", "/healthz"), 200) == {"status": "ok"}
    assert expect(await api.request("GET", "/readyz"), 200) == {"status": "ok"}
    expect(await api.create(biz_type="orders", job_id="m", delay_ms=1), 201)
    response = await api.request("GET", "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'timer_jobs_created_total{biz_type="orders"} 1.0' in response.text, response.text


async def test_readyz_fails_when_a_check_fails(make_api: Callable[..., Any]) -> None:
    async def broken() -> None:
        raise ConnectionError("queue down")

    api = await make_api(ready_checks=[broken])
    problem = expect(await api.request("GET", "/readyz"), 503)
    # What broke goes to the log; the answer names no internals (an unauthenticated
    # endpoint must not show driver text).
    assert "queue down" not in problem["detail"] and "queue" in problem["detail"], problem


async def test_readyz_fails_when_the_store_does_not_answer(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    await api.store.close()
    expect(await api.request("GET", "/readyz"), 503)
    assert expect(await api.request("GET", "/healthz"), 200) == {"status": "ok"}


async def test_openapi_schema_is_complete(api: Api) -> None:
    schema = expect(await api.request("GET", "/openapi.json"), 200)
    text = json.dumps(schema)
    defined = set(schema["components"]["schemas"])
    referenced = set(re.findall(r"#/components/schemas/([^\"]+)", text))
    assert referenced <= defined, f"dangling refs: {referenced - defined}"
    create = schema["paths"]["/v1/jobs"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]
    for status in ("200", "201", "409", "413", "422"):
        assert status in create["responses"], f"{status} not declared: {create['responses']}"
    assert "application/problem+json" in create["responses"]["422"]["content"]
    assert "put" in schema["paths"]["/v1/schedules/{biz_type}/{schedule_id}"]
    docs = await api.request("GET", "/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
