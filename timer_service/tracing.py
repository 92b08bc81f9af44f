"""Tracing facade: the API, the daemon and the broker say what they do; only
`timer_service.otel` knows OpenTelemetry, and it is imported only when an exporter is
configured (`TIMER_OTEL_EXPORTER`). Off (the default), `NO_TRACING` still carries a
job's W3C trace context from its registration to its callbacks, a fresh span id per
attempt, and costs nothing more (docs/operations.md, "Traces").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from timer_service.dispatch import Claimed
from timer_service.model import Job
from timer_service.tracecontext import TraceContext, new_span_id, parse_traceparent

Exporter = Literal["none", "console", "otlp"]


class RequestSpan:
    """An API request's span. `job_trace` is the trace context jobs registered by this
    request keep: the caller's own when not tracing, else this span's."""

    __slots__ = ("job_trace",)

    def __init__(self, job_trace: TraceContext | None) -> None:
        self.job_trace = job_trace

    def end(self, route: str, status: int) -> None:
        """The request was answered with `status` by the route with this template."""


class DispatchSpans:
    """The spans of one publish round of claimed jobs."""

    def end(self, confirmed: bool) -> None:
        """The queue confirmed the round (or did not)."""


class CallbackSpan:
    """One callback attempt's span; `traceparent` is what the request carries (None
    for a job registered without a trace context)."""

    __slots__ = ("traceparent",)

    def __init__(self, traceparent: str | None) -> None:
        self.traceparent = traceparent

    def end(self, outcome: str, status_code: int | None) -> None:
        """The attempt came to `outcome` (delivered, retry, dead)."""


NO_CALLBACK_SPAN = CallbackSpan(None)
_NO_DISPATCH_SPANS = DispatchSpans()


class Tracing:
    """No tracing: spans are not recorded, trace context is still passed on."""

    enabled = False

    def request_started(self, method: str, incoming: TraceContext | None) -> RequestSpan:
        return RequestSpan(incoming)

    def dispatch_started(self, claims: Sequence[Claimed]) -> DispatchSpans:
        return _NO_DISPATCH_SPANS

    def callback_started(self, job: Job, attempt: int) -> CallbackSpan:
        """The span of a callback attempt: a child of the job's stored parent."""
        if job.trace is None:
            return NO_CALLBACK_SPAN
        parent = parse_traceparent(job.trace.traceparent)
        if parent is None:
            return NO_CALLBACK_SPAN
        return CallbackSpan(parent.child(new_span_id()))

    def close(self) -> None:
        """Flush what is recorded and stop; the process is stopping."""


NO_TRACING = Tracing()


class TracingUnavailable(RuntimeError):
    """An exporter is configured but OpenTelemetry is not installed."""


def build_tracing(exporter: Exporter, service_name: str) -> Tracing:
    """The process's tracing for `TIMER_OTEL_EXPORTER`. OpenTelemetry is imported here
    and only here, and only when an exporter is configured."""
    if exporter == "none":
        return NO_TRACING
    try:
        from timer_service.otel import OtelTracing
    except ImportError as exc:
        raise TracingUnavailable(
            f"TIMER_OTEL_EXPORTER={exporter} needs OpenTelemetry: install the 'otel' extra"
            " (pip install 'callback-timer-service[otel]')"
        ) from exc
    return OtelTracing.exporting(exporter, service_name)
