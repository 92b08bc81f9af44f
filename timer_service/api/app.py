"""The REST API application, assembled from injected parts (no globals, no environment)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from timer_service.api.auth import BearerAuthMiddleware
from timer_service.api.context import ApiContext
from timer_service.api.docs import install_openapi
from timer_service.api.limits import BodyLimitMiddleware
from timer_service.api.problems import (
    Problem,
    UnhandledErrorMiddleware,
    on_domain_error,
    on_http_exception,
    on_problem,
    on_request_validation,
)
from timer_service.api.routes_biz import build_biz_router
from timer_service.api.routes_console import build_console_router
from timer_service.api.routes_health import build_health_router
from timer_service.api.routes_jobs import build_jobs_router
from timer_service.api.routes_schedules import build_schedules_router
from timer_service.clock import Clock
from timer_service.errors import TimerServiceError
from timer_service.metrics import Metrics
from timer_service.scheduling import Scheduler
from timer_service.settings import Settings
from timer_service.store.base import Store
from timer_service.ui import install_console, install_docs
from timer_service.wiring import scheduler as default_scheduler

DESCRIPTION = """\
Persisted delayed HTTP callbacks: register a biz type (its callback URL, rate
limit and retry policy), then create jobs that are POSTed to it when due.
Every error is an RFC 9457 problem document (`application/problem+json`).
"""

TAGS = [
    {"name": "biz types", "description": "Each business's callback, limits and retry policy."},
    {"name": "jobs", "description": "Timers: create, read, list, cancel, reschedule, replay."},
    {"name": "schedules", "description": "Recurring schedules; each occurrence is a job."},
    {
        "name": "console",
        "description": "For operators: bulk cancel and replay by filter, the audit log, stats.",
    },
    {"name": "health", "description": "Liveness, readiness and Prometheus metrics (no auth)."},
]


def create_app(
    settings: Settings,
    store: Store,
    metrics: Metrics,
    clock: Clock,
    *,
    on_jobs_written: Callable[[Sequence[int]], None] | None = None,
    ready_checks: Sequence[Callable[[], Awaitable[None]]] = (),
    scheduler: Scheduler | None = None,
) -> FastAPI:
    ctx = ApiContext(settings, store, metrics, clock, on_jobs_written, tuple(ready_checks))
    if scheduler is None:
        scheduler = default_scheduler(store, metrics, clock)
    app = FastAPI(
        title="Timer service",
        version="0.1.0",
        description=DESCRIPTION,
        openapi_tags=TAGS,
        # Swagger UI from local assets (install_docs); FastAPI's own pages load from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    routers = [
        build_biz_router(ctx),
        build_jobs_router(ctx, scheduler),
        build_schedules_router(ctx, scheduler),
        build_console_router(ctx, scheduler),
        build_health_router(ctx),
    ]
    for router in routers:
        app.include_router(router)
    app.state.route_methods = [
        (route.path_regex, frozenset(route.methods or ()))
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
    ]

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(TimerServiceError, on_domain_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(RequestValidationError, on_request_validation)

    # Added innermost first: errors -> auth -> body limit -> the routes.
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    if settings.api_token:
        app.add_middleware(BearerAuthMiddleware, token=settings.api_token)
    app.add_middleware(UnhandledErrorMiddleware)

    install_openapi(app)
    install_docs(app)
    install_console(app)
    app.state.context = ctx
    app.state.scheduler = scheduler
    return app
