"""Trace context from registration to callback: sent on every attempt as a child of the
stored parent; with OpenTelemetry on, one trace links registration -> dispatch ->
callback; with it off, OpenTelemetry is never imported (timer_service.tracing)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from broker.callback import CallbackRequest, Response, build_request
from broker.lane import Lane
from broker.marks import MarkWriter
from broker.outcomes import OutcomeWriter
from tests.unit.daemon_harness import Harness, run_until
from tests.unit.test_broker_lane import OUTCOME_WAIT_MS
from timer_service.api import create_app
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed
from timer_service.jobs import NewJob
from timer_service.logs import ContextFilter, JsonFormatter
from timer_service.metrics import Metrics
from timer_service.model import BizType, Job, JobState, second_of
from timer_service.otel import OtelTracing
from timer_service.settings import Settings
from timer_service.tracecontext import TraceContext, parse_traceparent
from timer_service.tracing import NO_TRACING, Tracing, TracingUnavailable, build_tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
URL = "http://127.0.0.1:1/cb"


class ScriptedSender:
    """Answers each callback with the next status of its script, by the fake clock."""

    def __init__(self, clock: FakeClock, *statuses: int) -> None:
        self.clock = clock
        self.statuses = list(statuses)
        self.sent: list[CallbackRequest] = []

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        self.sent.append(request)
        return Response(self.statuses.pop(0) if self.statuses else 200)


class FakeDelivery:
    def __init__(self, job: Claimed) -> None:
        self.job = job
        self.redelivered = False
        self.fates: list[str] = []
        self.live = True

    async def ack(self) -> None:
        self.fates.append("ack")

    async def requeue(self) -> None:
        self.fates.append("requeue")

    async def drop(self) -> None:
        self.fates.append("drop")


@pytest.fixture
async def outcomes(memory_store: Any, fake_clock: FakeClock) -> AsyncIterator[OutcomeWriter]:
    writer = OutcomeWriter(memory_store.outcomes, Metrics(), fake_clock)
    writer.start()
    yield writer
    await writer.stop()


async def send_once(
    store: Any, clock: FakeClock, lane: Lane, sender: ScriptedSender, job_id: str
) -> None:
    """Claim the job's due attempt, hand its message to the lane, and drive the lane
    on the fake clock until the callback went out and its outcome is stored."""
    job = await store.jobs.get_job("orders", job_id)
    at = job.next_attempt_at
    clock.set(max(clock.now_ms(), at))
    claims = await store.scan.claim_due(second_of(at), at, f"c{at}", 1, clock.now_ms())
    assert [c.job_id for c in claims] == [job_id], f"expected to claim {job_id} only: {claims}"
    [claimed] = claims
    before = len(sender.sent)
    lane.offer(FakeDelivery(claimed))
    for _ in range(50):
        delay = lane._step()
        for _ in range(20):
            await asyncio.sleep(0)
        if len(sender.sent) > before:
            break
        clock.advance(max(1, round((delay or 0.001) * 1000)))
    assert len(sender.sent) == before + 1, f"{job_id}: expected one more callback"
    await clock.run_for(OUTCOME_WAIT_MS)
    for _ in range(20):
        await asyncio.sleep(0)


def make_lane(
    store: Any, outcomes: OutcomeWriter, sender: ScriptedSender, tracing: Tracing
) -> Lane:
    return Lane(
        BizType("orders", URL),
        marks=MarkWriter(store.outcomes, Metrics(), sender.clock, "broker"),
        sender=sender,  # type: ignore[arg-type]
        outcomes=outcomes,
        metrics=Metrics(),
        clock=sender.clock,
        tracing=tracing,
    )


# -- tracing off: the context still goes out -----------------------------------------


def test_the_callback_request_carries_the_attempts_traceparent_and_the_tracestate() -> None:
    job = Job("orders", "j", 0, "{}", JobState.DISPATCHED, 0, 0, 0, 0)
    traced = job.evolve(trace=TraceContext(TRACEPARENT, "vendor=1"))
    child = f"00-{TRACE_ID}-1111111111111111-01"

    headers = build_request(BizType("orders", URL), traced, 1, 5, child).headers
    assert (headers.get("traceparent"), headers.get("tracestate")) == (child, "vendor=1")
    plain = build_request(BizType("orders", URL), job, 1, 5).headers
    assert "traceparent" not in plain and "tracestate" not in plain, f"got {plain}"


async def test_each_attempt_sends_a_new_child_of_the_stored_parent(
    memory_store: Any, fake_clock: FakeClock, outcomes: OutcomeWriter
) -> None:
    due = fake_clock.now_ms() + 1000
    trace = TraceContext(TRACEPARENT, "vendor=1")
    await memory_store.jobs.create_jobs(
        [
            NewJob("orders", "traced", due, "{}", trace=trace),
            NewJob("orders", "plain", due + 100_000, "{}"),  # well after the traced one's retry
        ],
        fake_clock.now_ms(),
    )
    sender = ScriptedSender(fake_clock, 503, 200)
    lane = make_lane(memory_store, outcomes, sender, NO_TRACING)

    await send_once(memory_store, fake_clock, lane, sender, "traced")  # 503: a retry
    await send_once(memory_store, fake_clock, lane, sender, "traced")  # 200
    await send_once(memory_store, fake_clock, lane, sender, "plain")
    await lane.close()

    job = await memory_store.jobs.get_job("orders", "traced")
    assert job.state is JobState.DELIVERED and job.trace == trace, f"got {job}"
    first, second = (parse_traceparent(r.headers.get("traceparent")) for r in sender.sent[:2])
    assert first is not None and second is not None, f"got {sender.sent[:2]}"
    assert first.trace_id == second.trace_id == TRACE_ID, "the trace changed"
    assert first.flags == second.flags == "01", "the sampled flag was not kept"
    assert len({first.parent_id, second.parent_id, CALLER_SPAN}) == 3, (
        f"expected a fresh span per attempt, got {first.parent_id}, {second.parent_id}"
    )
    assert [r.headers.get("tracestate") for r in sender.sent[:2]] == ["vendor=1", "vendor=1"]
    assert "traceparent" not in sender.sent[2].headers, "a job without a trace got one"


async def test_a_failed_callbacks_log_line_carries_the_jobs_trace_id(
    memory_store: Any, fake_clock: FakeClock, outcomes: OutcomeWriter
) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    lane_log = logging.getLogger("broker.lane")
    lane_log.addHandler(handler)
    old_level = lane_log.level
    lane_log.setLevel(logging.INFO)
    due = fake_clock.now_ms() + 1000
    await memory_store.jobs.create_jobs(
        [
            NewJob("orders", "traced", due, "{}", trace=TraceContext(TRACEPARENT)),
            NewJob("orders", "plain", due + 1, "{}"),
        ],
        fake_clock.now_ms(),
    )
    sender = ScriptedSender(fake_clock, 503, 503)
    lane = make_lane(memory_store, outcomes, sender, NO_TRACING)
    try:
        await send_once(memory_store, fake_clock, lane, sender, "traced")
        await send_once(memory_store, fake_clock, lane, sender, "plain")
    finally:
        await lane.close()
        lane_log.removeHandler(handler)
        lane_log.setLevel(old_level)

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    failed = {e["job_id"]: e for e in lines if e["event"] == "callback failed"}
    assert failed["traced"].get("trace_id") == TRACE_ID, f"got {failed['traced']}"
    assert "trace_id" not in failed["plain"], f"a job without a trace got one: {failed}"


# -- tracing on: one trace from registration to callback -------------------------------


async def test_one_trace_links_registration_dispatch_and_callback(
    memory_store: Any, fake_clock: FakeClock, outcomes: OutcomeWriter
) -> None:
    exporter = InMemorySpanExporter()
    tracing = OtelTracing.with_processor(SimpleSpanProcessor(exporter), "timer-test")
    app = create_app(
        Settings(_env_file=None),  # type: ignore[call-arg]
        memory_store,
        Metrics(),
        fake_clock,
        tracing=tracing,
    )
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        await client.put("/v1/biz-types/orders", json={"callback_url": URL})
        body = {"biz_type": "orders", "job_id": "o-1", "delay_ms": 3000}
        created = await client.post("/v1/jobs", json=body, headers={"traceparent": TRACEPARENT})
        assert created.status_code == 201, created.text

    daemon = Harness(memory_store, fake_clock, watch=False, tracing=tracing)
    due = fake_clock.now_ms() + 3000
    await run_until(due, daemon)
    [claimed] = [c for _, c in daemon.queue.at]
    sender = ScriptedSender(fake_clock, 200)
    lane = make_lane(memory_store, outcomes, sender, tracing)
    lane.offer(FakeDelivery(claimed))
    for _ in range(50):
        lane._step()
        for _ in range(20):
            await asyncio.sleep(0)
        if sender.sent:
            break
        fake_clock.advance(10)
    await fake_clock.run_for(OUTCOME_WAIT_MS)
    await lane.close()
    await daemon.daemon.stop()

    spans = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(TRACE_ID, 16)]
    by_kind = {s.kind: s for s in spans}
    assert sorted(s.name for s in spans) == ["POST /v1/jobs", "callback orders", "dispatch orders"]
    api, dispatch, callback = (
        by_kind[k] for k in (SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CLIENT)
    )
    assert api.parent is not None and api.parent.span_id == int(CALLER_SPAN, 16), "not the caller's"
    for child in (dispatch, callback):
        assert child.parent is not None and child.parent.span_id == api.context.span_id, (
            f"{child.name}: expected a child of the registration span"
        )
    sent = parse_traceparent(sender.sent[0].headers.get("traceparent"))
    assert sent is not None and sent.parent_id == f"{callback.context.span_id:016x}", (
        f"the callback's traceparent should name the callback span, got {sent}"
    )
    assert callback.attributes is not None and callback.attributes["timer.outcome"] == "delivered"
    assert api.attributes is not None and api.attributes["http.response.status_code"] == 201
    job = await memory_store.jobs.get_job("orders", "o-1")
    assert job.trace.traceparent == f"00-{TRACE_ID}-{api.context.span_id:016x}-01", f"got {job}"


# -- choosing an exporter, and the cost of none --------------------------------------


def test_no_exporter_is_the_default_and_builds_no_tracing() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.otel_exporter == "none"
    assert build_tracing(settings.otel_exporter, "x") is NO_TRACING
    assert isinstance(build_tracing("console", "x"), OtelTracing)
    with pytest.raises(ValidationError):
        Settings(_env_file=None, otel_exporter="jaeger")  # type: ignore[call-arg]
    assert issubclass(TracingUnavailable, RuntimeError)


def run_python(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


DAEMON_AND_BROKER = """
    import sys
    from broker.app import Broker
    from daemon.app import Daemon
    from timer_service.clock import SystemClock
    from timer_service.metrics import Metrics
    from timer_service.queue.memory import MemoryQueue
    from timer_service.settings import Settings
    from timer_service.store.memory import MemoryStore
    from timer_service.tracing import build_tracing

    settings = Settings(_env_file=None, otel_exporter=sys.argv[1])
    tracing = build_tracing(settings.otel_exporter, "timer-test")
    store, queue, clock = MemoryStore(buckets=60, retention_ms=1000), MemoryQueue(), SystemClock()
    Daemon(settings, store, queue, Metrics(), clock, tracing=tracing)
    Broker(settings, store, queue, Metrics(), clock, tracing=tracing)
    print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_daemon_and_broker_without_an_exporter_never_import_opentelemetry() -> None:
    assert run_python(DAEMON_AND_BROKER, "none") == "[]"
    # The control: the same check sees OpenTelemetry when an exporter is on.
    assert "opentelemetry.sdk.trace" in run_python(DAEMON_AND_BROKER, "console")


API_REQUEST = """
    import asyncio, sys
    import fastapi  # newer FastAPI imports opentelemetry-api itself, whatever we do
    before = {m for m in sys.modules if m.split(".")[0] == "opentelemetry"}
    import httpx
    from timer_service.api import create_app
    from timer_service.clock import FakeClock
    from timer_service.metrics import Metrics
    from timer_service.settings import Settings
    from timer_service.store.memory import MemoryStore
    from timer_service.tracing import build_tracing

    async def main():
        settings = Settings(_env_file=None, otel_exporter=sys.argv[1])
        store = MemoryStore(buckets=60, retention_ms=1000)
        await store.setup()
        tracing = build_tracing(settings.otel_exporter, "timer-test")
        app = create_app(settings, store, Metrics(), FakeClock(0), tracing=tracing)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            await client.put("/v1/biz-types/b", json={"callback_url": "http://127.0.0.1:1/"})
            tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            r = await client.post("/v1/jobs", json={"biz_type": "b", "delay_ms": 0},
                                  headers={"traceparent": tp})
            assert r.status_code == 201, r.text

    asyncio.run(main())
    added = {m for m in sys.modules if m.split(".")[0] == "opentelemetry"} - before
    print(sorted(added | ({"timer_service.otel"} & set(sys.modules))))
"""


def test_the_api_without_an_exporter_imports_no_opentelemetry_of_its_own() -> None:
    assert run_python(API_REQUEST, "none") == "[]"
    with_exporter = run_python(API_REQUEST, "console")
    assert "opentelemetry.sdk.trace" in with_exporter and "timer_service.otel" in with_exporter


FASTAPI_OWN_TELEMETRY = """
    import asyncio
    import httpx
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from timer_service.api import create_app
    from timer_service.clock import FakeClock
    from timer_service.metrics import Metrics
    from timer_service.settings import Settings
    from timer_service.store.memory import MemoryStore

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # what would switch FastAPI's own tracing on

    async def main():
        app = create_app(Settings(_env_file=None), MemoryStore(buckets=60, retention_ms=1),
                         Metrics(), FakeClock(0))
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            assert (await client.get("/healthz")).status_code == 200

    asyncio.run(main())
    print(len(exporter.get_finished_spans()))
"""


def test_fastapis_own_tracing_stays_off_even_with_a_global_provider() -> None:
    assert run_python(FASTAPI_OWN_TELEMETRY) == "0", "FastAPI traced a request on its own"
