"""What each API request leaves behind: RED metrics by route template, runtime
collectors and no `_created` series on /metrics, a request id, one access log line,
and the trace context jobs keep (api.observe; docs/operations.md)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.unit.api_harness import new_app
from timer_service.api.observe import ObserveMiddleware
from timer_service.clock import FakeClock
from timer_service.logs import ContextFilter, JsonFormatter
from timer_service.metrics import Metrics
from timer_service.store.memory import MemoryStore
from timer_service.tracecontext import TraceContext
from timer_service.tracing import NO_TRACING

NOW = 1_767_225_600_000
CALLBACK = {"callback_url": "http://127.0.0.1:9000/cb"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
GENERATED_ID = re.compile(r"[0-9a-f]{32}")


class Api:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, metrics: Metrics) -> None:
        self.client = client
        self.store = store
        self.metrics = metrics

    def count(self, method: str, route: str, status: int) -> float:
        labels = {"method": method, "route": route, "status": str(status)}
        return self.metrics.registry.get_sample_value("timer_http_requests_total", labels) or 0.0

    def duration(self, method: str, route: str, sample: str) -> float:
        labels = {"method": method, "route": route}
        name = f"timer_http_request_duration_seconds_{sample}"
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def make_api() -> AsyncIterator[Callable[..., Any]]:
    clients: list[httpx.AsyncClient] = []

    async def make(ready_checks: Any = (), **settings: Any) -> Api:
        store = MemoryStore(buckets=60, retention_ms=86_400_000)
        await store.setup()
        metrics = Metrics()
        clock = FakeClock(NOW)
        app = new_app(
            store,
            metrics,
            clock,
            settings,
            ready_checks=[check(clock) for check in ready_checks],
            tracing=NO_TRACING,
        )
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://api")
        clients.append(client)
        return Api(client, store, metrics)

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every log line as the processes write it: JSON, with the context filter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(old_level)


def entries(out: io.StringIO, event: str | None = None) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    return [e for e in lines if event is None or e["event"] == event]


# -- RED metrics -------------------------------------------------------------------


async def test_requests_are_counted_by_route_template_not_raw_path(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api()
    assert (await api.client.put("/v1/biz-types/orders", json=CALLBACK)).status_code == 201
    for job_id in ("a", "b", "c"):
        assert (await api.client.get(f"/v1/jobs/orders/{job_id}")).status_code == 404

    template = "/v1/jobs/{biz_type}/{job_id}"
    assert api.count("GET", template, 404) == 3, "three 404s of one route"
    assert api.count("PUT", "/v1/biz-types/{biz_type}", 201) == 1
    assert api.duration("GET", template, "count") == 3
    text = (await api.client.get("/metrics")).text
    assert "/v1/jobs/orders/a" not in text, "a raw path became a label value"


async def test_unmatched_paths_and_odd_methods_share_one_label_value(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api()
    for path in ("/nope", "/v1/nothing/here", "/" + "x" * 300):
        assert (await api.client.get(path)).status_code == 404
    assert (await api.client.request("BREW", "/v1/jobs")).status_code == 405

    assert api.count("GET", "unmatched", 404) == 3
    assert api.count("other", "/v1/jobs", 405) == 1, "a method nobody uses is 'other'"


async def test_refusals_before_routing_are_counted_under_their_route(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api(api_token="t0k3n", max_body_bytes=1024)
    assert (await api.client.get("/v1/jobs/orders/x")).status_code == 401
    too_big = {"Authorization": "Bearer t0k3n", "Content-Type": "application/json"}
    response = await api.client.post("/v1/jobs", content=b"x" * 2048, headers=too_big)
    assert response.status_code == 413

    assert api.count("GET", "/v1/jobs/{biz_type}/{job_id}", 401) == 1
    assert api.count("POST", "/v1/jobs", 413) == 1


async def test_duration_is_measured_on_the_injected_clock(make_api: Callable[..., Any]) -> None:
    def slow(clock: FakeClock) -> Any:
        async def check() -> None:
            clock.advance(250)

        return check

    api = await make_api(ready_checks=[slow])
    assert (await api.client.get("/readyz")).status_code == 200
    assert api.duration("GET", "/readyz", "sum") == pytest.approx(0.25)
    le_100ms = api.metrics.registry.get_sample_value(
        "timer_http_request_duration_seconds_bucket",
        {"method": "GET", "route": "/readyz", "le": "0.1"},
    )
    assert le_100ms == 0, f"a 250 ms request fell in the 100 ms bucket ({le_100ms})"


async def test_metrics_page_has_runtime_collectors_and_no_created_series(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api()
    await api.client.put("/v1/biz-types/orders", json=CALLBACK)
    await api.client.post("/v1/jobs", json={"biz_type": "orders", "delay_ms": 1000})
    text = (await api.client.get("/metrics")).text

    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    created = sorted(n for n in names if n.endswith("_created"))
    assert not created, f"expected no *_created series, got {created}"
    for wanted in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "python_gc_collections_total",
        "python_info",
        "timer_jobs_created_total",
        "timer_http_requests_total",
        "timer_http_request_duration_seconds_bucket",
    ):
        assert wanted in names, f"{wanted} missing from /metrics; got {sorted(names)}"


# -- request id and access log -------------------------------------------------------


async def test_a_safe_request_id_is_kept_and_returned(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    response = await api.client.get("/healthz", headers={"X-Request-Id": "req-42:a/b+c=@d.e_f"})
    assert response.headers["x-request-id"] == "req-42:a/b+c=@d.e_f"


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("X-Request-Id", "x" * 129)],
        [("X-Request-Id", "")],
        [("X-Request-Id", "evil\"} {'level': 'error'")],
        [("X-Request-Id", "café")],
        [("X-Request-Id", "a"), ("X-Request-Id", "b")],
    ],
)
async def test_a_missing_or_unsafe_request_id_is_replaced(
    make_api: Callable[..., Any], headers: list[tuple[str, str]]
) -> None:
    api = await make_api()
    encoded = [(k.encode(), v.encode()) for k, v in headers]
    response = await api.client.get("/healthz", headers=encoded)
    got = response.headers["x-request-id"]
    assert GENERATED_ID.fullmatch(got), f"expected a generated id for {headers}, got {got!r}"


async def test_errors_carry_the_request_id_too(make_api: Callable[..., Any]) -> None:
    api = await make_api(api_token="t0k3n")
    response = await api.client.get("/v1/jobs", headers={"X-Request-Id": "r-401"})
    assert response.status_code == 401 and response.headers["x-request-id"] == "r-401"


async def test_one_access_log_line_per_request(
    make_api: Callable[..., Any], log_lines: io.StringIO
) -> None:
    api = await make_api()
    await api.client.get("/v1/jobs/orders/o-1", headers={"X-Request-Id": "r-1"})

    [line] = entries(log_lines, "request")
    assert line["logger"] == "timer_service.access" and line["level"] == "info"
    expected = {
        "method": "GET",
        "route": "/v1/jobs/{biz_type}/{job_id}",
        "path": "/v1/jobs/orders/o-1",
        "status": 404,
        "request_id": "r-1",
        "remote": "127.0.0.1",
    }
    assert {k: line.get(k) for k in expected} == expected, f"got {line}"
    assert isinstance(line["duration_ms"], float | int) and line["duration_ms"] >= 0


async def test_every_line_logged_while_handling_a_request_carries_its_id(
    make_api: Callable[..., Any], log_lines: io.StringIO
) -> None:
    def failing(_: FakeClock) -> Any:
        async def check() -> None:
            raise ConnectionError("queue away")

        return check

    api = await make_api(ready_checks=[failing])
    assert (await api.client.get("/readyz", headers={"X-Request-Id": "r-ready"})).status_code == 503
    logging.getLogger("outside").warning("not during a request")

    by_event = {e["event"]: e for e in entries(log_lines)}
    assert by_event["not ready"].get("request_id") == "r-ready", f"got {by_event['not ready']}"
    assert by_event["request"]["request_id"] == "r-ready"
    assert "request_id" not in by_event["not during a request"], "the id leaked out"


async def test_lines_logged_while_handling_a_traced_request_carry_its_trace_id(
    make_api: Callable[..., Any], log_lines: io.StringIO
) -> None:
    api = await make_api()
    await api.client.get("/v1/jobs/orders/o-1", headers={"traceparent": TRACEPARENT})
    await api.client.get("/v1/jobs/orders/o-2")
    logging.getLogger("outside").warning("not during a request")

    traced, plain = entries(log_lines, "request")
    assert traced["trace_id"] == TRACEPARENT.split("-")[1], f"got {traced}"
    assert "trace_id" not in plain, f"a request without a trace got one: {plain}"
    assert "trace_id" not in entries(log_lines, "not during a request")[0], "the id leaked out"


async def test_successful_probes_and_scrapes_are_logged_at_debug(
    make_api: Callable[..., Any], log_lines: io.StringIO
) -> None:
    api = await make_api()
    for path in ("/healthz", "/readyz", "/metrics"):
        await api.client.get(path)
    levels = {e["path"]: e["level"] for e in entries(log_lines, "request")}
    assert levels == {"/healthz": "debug", "/readyz": "debug", "/metrics": "debug"}, levels


async def test_the_access_line_names_the_actor_auth_set(log_lines: io.StringIO) -> None:
    async def whoami(request: Request) -> PlainTextResponse:
        request.state.actor = "billing-team"
        return PlainTextResponse("ok")

    app = ObserveMiddleware(
        Starlette(routes=[Route("/v1/whoami", whoami)]), Metrics(), FakeClock(NOW), NO_TRACING
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://a") as c:
        assert (await c.get("/v1/whoami")).status_code == 200
    [line] = entries(log_lines, "request")
    assert line["actor"] == "billing-team" and line["route"] == "/v1/whoami", f"got {line}"


# -- trace context kept with the job --------------------------------------------------------


async def test_a_valid_traceparent_is_kept_with_each_job_it_registers(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api()
    await api.client.put("/v1/biz-types/orders", json=CALLBACK)
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
    one = {"biz_type": "orders", "job_id": "one", "delay_ms": 1000}
    assert (await api.client.post("/v1/jobs", json=one, headers=headers)).status_code == 201
    batch = {"jobs": [{"biz_type": "orders", "job_id": f"b{i}", "delay_ms": 1} for i in range(3)]}
    response = await api.client.post("/v1/jobs:batch", json=batch, headers=headers)
    assert [r["status"] for r in response.json()["results"]] == [201, 201, 201]

    for job_id in ("one", "b0", "b1", "b2"):
        job = await api.store.jobs.get_job("orders", job_id)
        assert job is not None and job.trace == TraceContext(TRACEPARENT, "vendor=abc"), (
            f"{job_id}: expected the request's trace context, got {job and job.trace}"
        )
    public = (await api.client.get("/v1/jobs/orders/one")).json()
    assert "trace" not in public and "traceparent" not in public, "internal field shown"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"traceparent": "00-garbage"},
        {"traceparent": TRACEPARENT.upper()},
        {"tracestate": "vendor=abc"},
    ],
)
async def test_no_or_a_malformed_traceparent_registers_the_job_without_one(
    make_api: Callable[..., Any], headers: dict[str, str]
) -> None:
    api = await make_api()
    await api.client.put("/v1/biz-types/orders", json=CALLBACK)
    body = {"biz_type": "orders", "job_id": "j", "delay_ms": 1000}
    response = await api.client.post("/v1/jobs", json=body, headers=headers)
    assert response.status_code == 201, f"{headers}: got {response.status_code} {response.text}"
    job = await api.store.jobs.get_job("orders", "j")
    assert job is not None and job.trace is None, f"{headers}: got {job and job.trace}"
