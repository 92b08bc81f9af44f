"""The REST API application, assembled from injected parts (no globals, no environment)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import Depends, FastAPI, Security
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from timer_service.api import (
    routes_biz,
    routes_calendar,
    routes_canary,
    routes_console,
    routes_health,
    routes_jobs,
    routes_problems,
    routes_schedules,
    routes_servers,
    routes_tokens,
)
from timer_service.api.access import check_declared
from timer_service.api.admission import AdmissionGate, AdmissionMiddleware
from timer_service.api.auth import BearerAuthMiddleware, bearer_scheme
from timer_service.api.context import ApiContext
from timer_service.api.docs import GATED_RESPONSES, install_openapi, operation_id, problems
from timer_service.api.guards import AllowedHostsMiddleware, JsonBodiesOnlyMiddleware
from timer_service.api.limits import BodyLimitMiddleware
from timer_service.api.observe import ObserveMiddleware
from timer_service.api.problems import (
    Problem,
    UnhandledErrorMiddleware,
    on_domain_error,
    on_http_exception,
    on_problem,
    on_request_validation,
)
from timer_service.api.query_params import refuse_unknown_query
from timer_service.api.token_table import TokenTable
from timer_service.clock import Clock
from timer_service.errors import TimerServiceError
from timer_service.metrics import Metrics
from timer_service.scheduling import Scheduler
from timer_service.settings import Settings
from timer_service.store.base import Store
from timer_service.tracing import NO_TRACING, Tracing
from timer_service.ui import install_console, install_docs
from timer_service.wiring import scheduler as default_scheduler

DESCRIPTION = """\
Persisted delayed HTTP callbacks: register a biz type (its callback URL, rate
limit and retry policy), then create jobs that are POSTed to it when due.
Every error is an RFC 9457 problem document (`application/problem+json`) whose `type`
(`/problems/{kind}`, described at that path) names the kind of failure.

Request bodies are JSON only (`Content-Type: application/json`, else 415) and validated
strictly: unknown fields, numbers with a fraction for integers, and integer times before
2001 in ms (seconds given for ms) are 422s naming the field. With a token configured,
every `/v1` path needs `Authorization: Bearer <token>` (the `bearerAuth` scheme): 401
without a valid one, 403 (`/problems/forbidden`) when its role or biz types do not allow
the request.
"""

TAGS = [
    {"name": "biz types", "description": "Each business's callback, limits and retry policy."},
    {"name": "jobs", "description": "Timers: create, read, list, cancel, reschedule, replay."},
    {"name": "schedules", "description": "Recurring schedules; each occurrence is a job."},
    {
        "name": "console",
        "description": "For operators: bulk cancel and replay by filter, the audit log, stats.",
    },
    {
        "name": "tokens",
        "description": "Access tokens: a role and the biz types it covers (docs/api.md,"
        ' "Access control"); 401 without a valid token, 403 outside its rights.',
    },
    {
        "name": "health",
        "description": "Liveness, readiness, Prometheus metrics and problem types (no auth).",
    },
]


# Recent FastAPI releases trace and meter each request themselves (opentelemetry-api is
# their dependency) as soon as a global OpenTelemetry provider exists. The service's own
# middleware (api.observe) does that, once, under TIMER_OTEL_EXPORTER: theirs stays off.
_FASTAPI_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(
    settings: Settings,
    store: Store,
    metrics: Metrics,
    clock: Clock,
    *,
    on_jobs_written: Callable[[Sequence[int]], None] | None = None,
    ready_checks: Sequence[Callable[[], Awaitable[None]]] = (),
    scheduler: Scheduler | None = None,
    tracing: Tracing = NO_TRACING,
) -> FastAPI:
    admission = AdmissionGate(
        settings.api_max_inflight, settings.api_admission_wait_ms, clock, metrics
    )
    ctx = ApiContext(
        settings, store, metrics, clock, on_jobs_written, tuple(ready_checks), admission
    )
    if scheduler is None:
        scheduler = default_scheduler(store, metrics, clock)
    app = FastAPI(
        title="Timer service",
        version="0.1.0",
        description=DESCRIPTION,
        openapi_tags=TAGS,
        generate_unique_id_function=operation_id,
        **_FASTAPI_TELEMETRY,
        # Swagger UI from local assets (install_docs); FastAPI's own pages load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    tokens = TokenTable(store.tokens, clock, settings.named_tokens())
    routers = [
        routes_biz.router,
        routes_jobs.router,
        routes_schedules.router,
        routes_console.router,
        routes_calendar.router,
        routes_servers.router,
        routes_tokens.router,
        routes_health.router,
        routes_canary.router,
        routes_problems.router,
    ]
    authenticated = [Security(bearer_scheme)]  # the OpenAPI's scheme; checks: BearerAuth
    query_checked = [Depends(refuse_unknown_query)]
    for router in routers:
        if router.prefix.startswith("/v1"):  # behind auth and the admission gate
            app.include_router(
                router,
                dependencies=[*authenticated, *query_checked],
                responses={**problems(401, 403), **GATED_RESPONSES},
            )
        else:
            app.include_router(router, dependencies=query_checked)
    api_routes = [
        route for router in routers for route in router.routes if isinstance(route, APIRoute)
    ]
    check_declared(api_routes, "/v1")  # every /v1 route says which role it needs
    app.state.api_routes = api_routes
    app.state.route_methods = [
        (route.path_regex, frozenset(route.methods or ())) for route in api_routes
    ]

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(TimerServiceError, on_domain_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_request_validation)

    # Added innermost first: observe -> errors -> host -> auth -> admission -> JSON only ->
    # body limit -> the routes. Every refusal before the routes is decided on the request
    # head, the body unread.
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(JsonBodiesOnlyMiddleware)
    app.add_middleware(AdmissionMiddleware, gate=admission, clock=clock)
    app.add_middleware(BearerAuthMiddleware, tokens=tokens)
    allowed_hosts = settings.allowed_host_list()
    if allowed_hosts is not None:
        app.add_middleware(AllowedHostsMiddleware, allowed_hosts=allowed_hosts)
    app.add_middleware(UnhandledErrorMiddleware)
    app.add_middleware(
        ObserveMiddleware, metrics=metrics, clock=clock, tracing=tracing, routes=api_routes
    )

    install_openapi(app)
    install_docs(app)
    install_console(app)
    # What the handlers' dependencies read (api/context.py: `Context`, `SchedulerDep`).
    app.state.context = ctx
    app.state.scheduler = scheduler
    app.state.tokens = tokens
    return app
