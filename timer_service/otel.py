"""OpenTelemetry spans for the API, dispatch and callbacks. Imported only by
`tracing.build_tracing` when `TIMER_OTEL_EXPORTER` names an exporter (the `otel` extra).

One trace per job: the API request that registers it is its root (or a child of the
caller's `traceparent`), and the job keeps that span's context; the daemon's publish
and every callback attempt are children of it, and each attempt's `traceparent` names
its own span, so the receiver's spans join the trace too.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)
from opentelemetry.trace import Span, SpanContext, SpanKind, StatusCode, TraceFlags, TraceState

from timer_service.dispatch import Claimed
from timer_service.model import Job
from timer_service.tracecontext import TraceContext, TraceParent, parse_traceparent
from timer_service.tracing import (
    NO_CALLBACK_SPAN,
    CallbackSpan,
    DispatchSpans,
    Exporter,
    RequestSpan,
    Tracing,
)

INSTRUMENTATION = "timer_service"


def _parent_context(traceparent: str | None, tracestate: str | None) -> Context | None:
    """An OpenTelemetry context whose current span is the remote parent, or None."""
    parent: TraceParent | None = parse_traceparent(traceparent)
    if parent is None:
        return None
    state = TraceState.from_header([tracestate]) if tracestate else None
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.parent_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent.flags, 16)),
        trace_state=state,
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(remote))


def traceparent_of(span: Span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class _OtelRequestSpan(RequestSpan):
    __slots__ = ("_method", "_span")

    def __init__(self, span: Span, method: str, tracestate: str | None) -> None:
        super().__init__(TraceContext(traceparent_of(span), tracestate))
        self._span = span
        self._method = method

    def end(self, route: str, status: int) -> None:
        self._span.update_name(f"{self._method} {route}")
        self._span.set_attribute("http.route", route)
        self._span.set_attribute("http.response.status_code", status)
        if status >= 500:
            self._span.set_status(StatusCode.ERROR)
        self._span.end()


class _OtelDispatchSpans(DispatchSpans):
    def __init__(self, spans: list[Span]) -> None:
        self._spans = spans

    def end(self, confirmed: bool) -> None:
        for span in self._spans:
            if not confirmed:
                span.set_status(StatusCode.ERROR, "not confirmed by the queue")
            span.end()


class _OtelCallbackSpan(CallbackSpan):
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        super().__init__(traceparent_of(span))
        self._span = span

    def end(self, outcome: str, status_code: int | None) -> None:
        self._span.set_attribute("timer.outcome", outcome)
        if status_code is not None:
            self._span.set_attribute("http.response.status_code", status_code)
        if outcome != "delivered":
            self._span.set_status(StatusCode.ERROR, outcome)
        self._span.end()


class OtelTracing(Tracing):
    enabled = True

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION)

    @classmethod
    def with_processor(cls, processor: SpanProcessor, service_name: str) -> OtelTracing:
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(processor)
        return cls(provider)

    @classmethod
    def exporting(cls, exporter: Exporter, service_name: str) -> OtelTracing:
        """Console: each span printed as it ends. OTLP over HTTP, batched: the exporter
        reads its endpoint and headers from the standard OTEL_EXPORTER_OTLP_* variables."""
        if exporter == "console":
            return cls.with_processor(SimpleSpanProcessor(ConsoleSpanExporter()), service_name)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return cls.with_processor(BatchSpanProcessor(OTLPSpanExporter()), service_name)

    def request_started(self, method: str, incoming: TraceContext | None) -> RequestSpan:
        parent = None if incoming is None else incoming.traceparent
        state = None if incoming is None else incoming.tracestate
        span = self._tracer.start_span(
            method,
            context=_parent_context(parent, state),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
        )
        return _OtelRequestSpan(span, method, state)

    def dispatch_started(self, claims: Sequence[Claimed]) -> DispatchSpans:
        spans = [
            self._tracer.start_span(
                f"dispatch {claim.biz_type}",
                context=_parent_context(claim.traceparent, None),
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": "rabbitmq",
                    "timer.biz_type": claim.biz_type,
                    "timer.job_id": claim.job_id,
                    "timer.attempt": claim.attempt,
                },
            )
            for claim in claims
            if claim.traceparent is not None
        ]
        return _OtelDispatchSpans(spans)

    def callback_started(self, job: Job, attempt: int) -> CallbackSpan:
        if job.trace is None:
            return NO_CALLBACK_SPAN
        context = _parent_context(job.trace.traceparent, job.trace.tracestate)
        if context is None:
            return NO_CALLBACK_SPAN
        span = self._tracer.start_span(
            f"callback {job.biz_type}",
            context=context,
            kind=SpanKind.CLIENT,
            attributes={
                "http.request.method": "POST",
                "timer.biz_type": job.biz_type,
                "timer.job_id": job.job_id,
                "timer.attempt": attempt,
            },
        )
        return _OtelCallbackSpan(span)

    def close(self) -> None:
        self._provider.shutdown()
