"""GET /v1/servers: the processes behind the service, for the console's servers view
(timer_service.servers)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from timer_service.access import Role
from timer_service.api.access import GrantDep, requires
from timer_service.api.context import ApiContext, Context
from timer_service.api.docs import problems
from timer_service.api.server_schemas import ServersOut
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.partitions import DAEMON_LEASE_PREFIX
from timer_service.servers import CanaryState, brokers_view, canary_view, daemons_view

# How far back the store is searched for a canary arrival: past three intervals (when
# the alert fires), and short, as the read goes through the index of every biz type's
# attempts (`history.at`): at the default 10 s interval, the last minute.
CANARY_LOOKBACK_INTERVALS = 6
MIN_CANARY_LOOKBACK_MS = 60_000


def canary_lookback_ms(interval_ms: int) -> int:
    return max(MIN_CANARY_LOOKBACK_MS, CANARY_LOOKBACK_INTERVALS * interval_ms)


router = APIRouter(prefix="/v1", tags=["console"], responses=problems(401, 500))


async def canary_last_success(ctx: ApiContext, now_ms: int) -> int | None:
    """The later of this replica's gauge and the store's last delivered canary attempt
    within the lookback (any replica's: the callback reaches one replica only)."""
    interval = ctx.settings.canary_interval_ms
    if interval == 0:
        return None
    since = now_ms - canary_lookback_ms(interval)
    attempts = await ctx.store.console.recent_attempts(since, CANARY_BIZ_TYPE)
    seen = [a.attempt.at for a in attempts if a.attempt.error is None]
    gauge_s = ctx.metrics.canary_last_success_s()
    if gauge_s is not None:
        seen.append(int(gauge_s * 1000))
    return max(seen, default=None)


@router.get(
    "/servers",
    summary="Daemons and their partitions, brokers and their biz types, the canary",
    description=(
        "Each broker lists only the biz types the token covers (a viewer of some biz types"
        " sees every broker, not the names of others' biz types). A lapsed lease stays"
        " under its last holder, marked `lapsed`, until another daemon takes it."
    ),
    response_model=ServersOut,
    dependencies=[requires(Role.VIEWER)],
)
async def servers(ctx: Context, grant: GrantDep) -> Response:
    now = ctx.clock.now_ms()
    leases, beats, last_canary = await asyncio.gather(
        ctx.store.leases.list_leases(DAEMON_LEASE_PREFIX),
        ctx.store.brokers.broker_beats(),
        canary_last_success(ctx, now),
    )
    return JSONResponse(
        {
            "at": now,
            "daemons": daemons_view(leases, ctx.settings.partitions, now),
            "brokers": brokers_view(beats, grant.covers, now),
            "canary": canary_view(
                CanaryState(
                    ctx.settings.canary_interval_ms,
                    last_canary,
                    canary_lookback_ms(ctx.settings.canary_interval_ms),
                ),
                now,
            ),
        }
    )
