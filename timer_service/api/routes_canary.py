"""POST /canary: where the service's own canary callbacks arrive (timer_service.canary).

Outside /v1 and its bearer auth, as a business endpoint would be: a callback carries
no token, only its Standard Webhooks signature, made with the canary biz type's secret.
A signed arrival sets the canary's two metrics; anything else is a 401 and sets none.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from timer_service.api.context import Context
from timer_service.api.docs import problems
from timer_service.api.problems import Problem
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.receiver import InvalidSignature, verify_callback

router = APIRouter(tags=["health"])


@router.post(
    "/canary",
    summary="The service's own canary callbacks (signed; not for clients)",
    status_code=204,
    responses=problems(401, 404),
)
async def canary_callback(request: Request, ctx: Context) -> Response:
    if ctx.settings.canary_interval_ms == 0:
        raise Problem(404, "The canary is off (TIMER_CANARY_INTERVAL_MS=0).")
    now = ctx.clock.now_ms()
    biz = await ctx.store.biz_types.get_biz_type(CANARY_BIZ_TYPE)
    secrets = biz.signing_secrets(now) if biz is not None else ()
    if not secrets:
        raise Problem(401, "No canary is set up here to verify a callback against.")
    try:
        callback = verify_callback(await request.body(), request.headers, secrets, now_ms=now)
    except InvalidSignature as exc:
        raise Problem(401, f"Not a canary callback of this service: {exc}") from None
    if callback.biz_type != CANARY_BIZ_TYPE:
        raise Problem(401, f"Not a canary callback: biz type {callback.biz_type!r}.")
    ctx.metrics.canary_arrived((now - callback.due_at) / 1000, now / 1000)
    return Response(status_code=204)
