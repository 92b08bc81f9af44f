"""/healthz, /readyz and /metrics: outside auth, for orchestrators and Prometheus."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from timer_service.api.context import Context
from timer_service.api.docs import retry_after
from timer_service.api.problems import OVERLOADED, problem_response
from timer_service.api.schemas import HealthOut
from timer_service.metrics import CONTENT_TYPE_LATEST, render

READY_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: 200 while the process runs", response_model=HealthOut)
async def healthz() -> Response:
    return JSONResponse({"status": "ok"})


@router.get(
    "/readyz",
    summary=(
        "Readiness: 200 when the store (and other dependencies) answer and the API"
        " is not shedding load"
    ),
    response_model=HealthOut,
    responses=retry_after(503, "Not ready: a dependency does not answer, or shedding load"),
)
async def readyz(
    ctx: Context,
) -> Response:
    if ctx.admission is not None and ctx.admission.shedding():
        # Tells a load balancer to send new work to another replica for a while
        # (docs/operations.md, "Overload"); the store is not asked meanwhile.
        return problem_response(
            503,
            "Not ready: shedding load (the API is at TIMER_API_MAX_INFLIGHT requests).",
            headers={"Retry-After": str(ctx.admission.retry_after_s())},
            type_=OVERLOADED,
        )
    checks = [ctx.store.ping, *ctx.ready_checks]
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            for check in checks:
                await check()
    except Exception as exc:  # any failure, or no answer in time, means not ready
        log.warning("not ready", extra={"error": repr(exc.__cause__ or exc)})
        return problem_response(
            503,
            "Not ready: a dependency (the job store or the queue) did not answer.",
            headers={"Retry-After": "2"},
        )
    return JSONResponse({"status": "ok"})


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(
    ctx: Context,
) -> Response:
    return Response(render(ctx.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
