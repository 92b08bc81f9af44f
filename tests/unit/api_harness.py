"""The REST API over the in-memory store, driven in-process: the app, its client and
the assertions every API test file shares (fixtures `make_api` and `api`, offered to
every unit test by tests/unit/conftest.py).

Each test gets its own app over its own store, clock, metrics and scheduler, but the
routes are prepared once per process for each set of settings (`new_app`, the fixture
`prepared_routes`): FastAPI prepares an app's included routes on its first request,
10-15 ms an app, most of what building an app per test used to cost. The `Settings`
are built once per set of values (tests/unit/settings_harness.py)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import BaseRoute

from tests.contract.stores import list_jobs
from tests.unit.settings_harness import settings as cached_settings
from timer_service.api import create_app
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.metrics import Metrics
from timer_service.model import Attempt
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

NOW = 1_767_225_600_000  # FakeClock's start: 2026-01-01T00:00:00Z
CALLBACK = {"callback_url": "http://127.0.0.1:9000/cb"}


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
PreparedRoutes = dict[str, list[BaseRoute]]


_PREPARED: PreparedRoutes = {}  # by settings: the included routes of the first app


@pytest.fixture(scope="session")
def prepared_routes() -> PreparedRoutes:
    """The included routes of the run's first app for each set of settings."""
    return _PREPARED


def new_app(
    store: Any, metrics: Metrics, clock: Any, settings: dict[str, Any] | None = None, **kw: Any
) -> FastAPI:
    """`create_app` with the `Settings` of `settings` (values by field name) and the
    routes already prepared for them, for the unit tests that build their own app."""
    values = settings or {}
    app = create_app(cached_settings(**values), store, metrics, clock, **kw)
    reuse_prepared_routes(app, _PREPARED, values)
    share_openapi(app)
    return app


_SCHEMAS: dict[tuple[Any, ...], dict[str, Any]] = {}  # by the app's routes


def share_openapi(app: FastAPI) -> None:
    """Generate the app's OpenAPI document once per process for each set of routes (the
    document depends on nothing else: ~150 ms a time), and give each app its own copy.
    A route a test adds changes the set, so its app gets a document of its own."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            key = tuple(_route_key(r) for r in app.router.routes)
            if key not in _SCHEMAS:
                _SCHEMAS[key] = copy.deepcopy(generate())
            app.openapi_schema = copy.deepcopy(_SCHEMAS[key])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _route_key(route: BaseRoute) -> tuple[Any, ...]:
    """A shared prepared router by identity (`_PREPARED` keeps it alive), an app's own
    route by what it declares."""
    if getattr(route, "original_router", None) is not None:
        return ("included", id(route))
    methods = sorted(getattr(route, "methods", None) or ())
    return (
        type(route).__name__,
        getattr(route, "path", None),
        tuple(methods),
        getattr(route, "include_in_schema", None),
        getattr(getattr(route, "endpoint", None), "__qualname__", None),
    )


def reuse_prepared_routes(app: FastAPI, prepared: PreparedRoutes, settings: dict[str, Any]) -> None:
    """Give `app` the included routers of the first app built with the same settings, which
    FastAPI prepared on that app's first request. They hold no state of their app: the
    routers are module-level, the handlers read their state from `request.app.state`,
    and the dependencies `create_app` adds to them do not depend on the app. Keyed by
    the settings all the same, in case one ever does. The list is the app's own, so a
    route a test adds stays in its app."""
    key = repr(sorted(settings.items()))
    first = prepared.setdefault(key, app.router.routes)
    own = app.router.routes
    app.router.routes = [
        mine if getattr(theirs, "original_router", None) is None else theirs
        for mine, theirs in zip(own, first, strict=True)
    ]


@pytest.fixture
async def make_api(prepared_routes: PreparedRoutes) -> AsyncIterator[Callable[..., Any]]:
    clients: list[httpx.AsyncClient] = []

    async def make(store: Any = None, ready_checks: Sequence[Any] = (), **settings: Any) -> Api:
        if store is None:
            store = recording(MemoryStore(buckets=60, retention_ms=86_400_000))
        await store.setup()
        clock = FakeClock(NOW)
        metrics = Metrics()
        written: list[list[int]] = []
        app = create_app(
            cached_settings(**settings),
            store,
            metrics,
            clock,
            on_jobs_written=lambda seconds: written.append(list(seconds)),
            ready_checks=ready_checks,
        )
        reuse_prepared_routes(app, prepared_routes, settings)
        share_openapi(app)
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
    claimed = await store.scan.claim_due(second, job.next_attempt_at, "c1", 1, NOW)
    assert [c.job_id for c in claimed] == [job_id], f"claim failed: {claimed}"
    attempt = Attempt(1, NOW, 500 if kind != OutcomeKind.DELIVERED else 200, None, 3)
    ref = SendRef(biz_type, job_id, second, "c1")
    await store.outcomes.record_outcomes([Outcome(ref, kind, attempt)], NOW)


async def dispatch(store: MemoryStore, biz_type: str, job_id: str) -> None:
    job = await store.jobs.get_job(biz_type, job_id)
    assert job is not None and job.next_attempt_at is not None
    claimed = await store.scan.claim_due(
        job.next_attempt_at // 1000, job.next_attempt_at, "c1", 1, NOW
    )
    assert claimed, "claim failed"
