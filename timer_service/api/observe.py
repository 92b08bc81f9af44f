"""What every API request leaves behind: its request id (in its answer and in every log
line written while handling it), its RED metrics by route template, one JSON access
log line, and its trace context (and span, when tracing): docs/operations.md.

The outermost middleware, so a request refused by auth or the body limit counts too.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from timer_service.clock import Clock
from timer_service.logs import current_request_id, log_trace
from timer_service.metrics import UNMATCHED_ROUTE, Metrics
from timer_service.tracecontext import trace_context
from timer_service.tracing import Tracing

access_log = logging.getLogger("timer_service.access")

REQUEST_ID_HEADER = "X-Request-Id"
# A caller's id is kept when it is 1-128 of these characters, else replaced: it goes
# into logs and answers, so nothing that could forge a log line or a header.
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
# Probes and scrapes that succeed are logged at DEBUG: every few seconds per replica,
# they would drown the lines that matter.
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def request_id_of(supplied: list[str]) -> str:
    """The caller's `X-Request-Id` (the one header) when it is safe to repeat, else a
    new one."""
    if len(supplied) == 1 and REQUEST_ID_RE.fullmatch(supplied[0]):
        return supplied[0]
    return secrets.token_hex(16)


def route_template(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The template of the route that handled (or would have handled) the request:
    the router leaves it in the scope; a request answered before routing (401, 413)
    is matched against `routes` here."""
    route = scope.get("route")
    if route is None:
        route = _match(scope, routes)
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


def _match(scope: Scope, routes: Sequence[BaseRoute]) -> BaseRoute | None:
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
        if match is Match.PARTIAL and partial is None:
            partial = route  # the path matches, the method does not: a 405
    return partial


class ObserveMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        clock: Clock,
        tracing: Tracing,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self._routes = routes
        self._metrics = metrics
        self._clock = clock
        self._tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self._clock.monotonic_s()
        headers = _headers(scope)
        request_id = request_id_of(headers.get(b"x-request-id", []))
        incoming = trace_context(headers.get(b"traceparent", []), headers.get(b"tracestate", []))
        method = scope["method"]
        span = self._tracing.request_started(method, incoming)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["trace"] = span.job_trace
        status = 500  # if the app fails before it answers
        id_header = (REQUEST_ID_HEADER.lower().encode(), request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), id_header]}
            await send(message)

        token = current_request_id.set(request_id)
        trace = span.job_trace
        with log_trace(None if trace is None else trace.traceparent):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                duration_s = max(0.0, self._clock.monotonic_s() - started)
                route = route_template(scope, self._routes)
                self._metrics.http_request(method, route, status, duration_s)
                span.end(route, status)
                _log(scope, method, route, status, duration_s, request_id)
                current_request_id.reset(token)


def _log(
    scope: Scope, method: str, route: str, status: int, duration_s: float, request_id: str
) -> None:
    path = scope["path"]
    quiet = path in QUIET_PATHS and status < 400
    level = logging.DEBUG if quiet else logging.INFO
    if not access_log.isEnabledFor(level):
        return
    client = scope.get("client")
    actor = scope.get("state", {}).get("actor")
    fields = {
        "method": method,
        "route": route,
        "path": path,
        "status": status,
        "duration_ms": round(duration_s * 1000, 3),
        "request_id": request_id,
        "remote": client[0] if client else None,
    }
    if actor is not None:
        fields["actor"] = actor
    access_log.log(level, "request", extra=fields)


def _headers(scope: Scope) -> dict[bytes, list[str]]:
    """The headers this middleware reads, each with all its values."""
    wanted: dict[bytes, list[str]] = {}
    for name, value in scope["headers"]:
        if name in (b"x-request-id", b"traceparent", b"tracestate"):
            wanted.setdefault(name, []).append(value.decode("latin-1"))
    return wanted
