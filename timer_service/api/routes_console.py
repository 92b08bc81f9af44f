"""The console's endpoints: bulk cancel and replay by filter, the audit log, stats."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from timer_service.access import Role
from timer_service.api.access import (
    GrantDep,
    check_biz_type,
    grant_of,
    requires,
    visible_biz_types,
)
from timer_service.api.bodies import read_json, validate
from timer_service.api.console_schemas import (
    AuditPageOut,
    BizStatsOut,
    BulkIn,
    BulkOut,
    SeriesOut,
    StatsOut,
)
from timer_service.api.context import ApiContext, Context, SchedulerDep
from timer_service.api.docs import json_body, problems
from timer_service.api.problems import Problem
from timer_service.audit import AuditAction
from timer_service.biz_hold import deleted_meanwhile
from timer_service.bulk import BulkRequest, run_bulk
from timer_service.constants import BIZ_TYPE_PATTERN, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT
from timer_service.errors import InvalidInput
from timer_service.model import BizType, JobState, labels_of
from timer_service.scheduling import Scheduler
from timer_service.search import BulkAction, JobFilter
from timer_service.series import minute_series, series_start
from timer_service.stats import LATENESS_WINDOW_MS, biz_stats

log = logging.getLogger(__name__)

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]

_AUDITED = {
    BulkAction.CANCEL: AuditAction.JOBS_BULK_CANCEL,
    BulkAction.REPLAY: AuditAction.JOBS_BULK_REPLAY,
}
_BULK_DOC = (
    "Body: `filter` (a `biz_type` is required), `dry_run`, `limit` (jobs per call, default"
    " 500), `cursor`. A dry run changes nothing and answers in `matched` how many jobs the"
    " action would change. A real run changes at most `limit` jobs and answers a"
    " `next_cursor` while more remain: repeat the call with it (and the same filter) until it"
    " is null. Jobs whose callback is in flight are skipped. Recorded in the audit log."
)


router = APIRouter(prefix="/v1", tags=["console"], responses=problems(401, 500))


async def bulk(
    action: BulkAction, request: Request, ctx: ApiContext, scheduler: Scheduler
) -> Response:
    """What `bulk_cancel` and `bulk_replay` do, `action` apart."""
    body = validate(BulkIn, await read_json(request))
    given = body.filter
    check_biz_type(grant_of(request), given.biz_type)
    where = JobFilter(
        biz_type=given.biz_type,
        states=None if given.state is None else frozenset({JobState(given.state)}),
        labels=labels_of(given.labels),
        job_id_prefix=given.job_id_prefix,
        due_after=given.due_after,
        due_before=given.due_before,
    )
    if await ctx.store.biz_types.get_biz_type(given.biz_type) is None:
        raise Problem(404, f"No biz type {given.biz_type!r}.")
    now = ctx.clock.now_ms()
    bulk_request = BulkRequest(action, where, body.dry_run, body.limit, body.cursor)
    try:
        result = await run_bulk(ctx.store.console, bulk_request, now)
    except InvalidInput as exc:
        raise Problem.invalid(["body", *exc.loc], str(exc)) from None
    if action is BulkAction.REPLAY and result.changed:
        revived = [*result.changed]
        if await deleted_meanwhile(
            ctx.store.biz_types, ctx.store.jobs, [given.biz_type], revived, now
        ):
            raise Problem(404, f"No biz type {given.biz_type!r}.")
    if not result.dry_run:
        await ctx.audit(
            request,
            _AUDITED[action],
            given.biz_type,
            filter=where.to_public(),
            count=len(result.changed),
            detail={
                "operation_id": result.operation_id,
                "matched": result.matched,
                "continued": body.cursor is not None,
                "done": result.next_cursor is None,
            },
        )
    if action is BulkAction.REPLAY and result.changed:
        ctx.jobs_written([now // 1000])
    if action is BulkAction.CANCEL:
        for job in result.changed:
            try:
                await scheduler.on_cancelled(job.biz_type, job.job_id)
            except Exception:  # the cancel is done; the schedule's repair mends the rest
                log.exception("schedule not advanced past a cancelled occurrence")
    return JSONResponse(result.to_public())


bulk_responses = problems(400, 404, 413, 422)


@router.post(
    "/jobs:bulk-cancel",
    summary="Cancel the pending and dispatched jobs a filter selects",
    description=_BULK_DOC,
    response_model=BulkOut,
    responses=bulk_responses,
    openapi_extra=json_body(BulkIn),
    dependencies=[requires(Role.OPERATOR, "body")],
)
async def bulk_cancel(request: Request, ctx: Context, scheduler: SchedulerDep) -> Response:
    return await bulk(BulkAction.CANCEL, request, ctx, scheduler)


@router.post(
    "/jobs:bulk-replay",
    summary="Replay the dead jobs a filter selects (through the biz type's rate limit)",
    description=_BULK_DOC,
    response_model=BulkOut,
    responses=bulk_responses,
    openapi_extra=json_body(BulkIn),
    dependencies=[requires(Role.OPERATOR, "body")],
)
async def bulk_replay(request: Request, ctx: Context, scheduler: SchedulerDep) -> Response:
    return await bulk(BulkAction.REPLAY, request, ctx, scheduler)


@router.get(
    "/audit",
    summary="The audit log of operator actions, newest first",
    response_model=AuditPageOut,
    responses=problems(422),
    dependencies=[requires(Role.VIEWER, "query")],
)
async def list_audit(
    ctx: Context,
    grant: GrantDep,
    biz_type: Annotated[str | None, Query(pattern=BIZ_TYPE_PATTERN)] = None,
    action: AuditAction | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    cursor: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    if biz_type is None:
        biz_type = grant.only_biz_type
    entries, next_cursor = await ctx.store.audit.list_entries(biz_type, action, limit, cursor)
    visible = grant.visible(entries, lambda entry: entry.biz_type)  # a page may end short
    return JSONResponse({"items": [e.to_public() for e in visible], "next_cursor": next_cursor})


async def stats_of(
    ctx: ApiContext, bizes: list[BizType], one: str | None
) -> list[dict[str, object]]:
    """The stats of `bizes` (of biz type `one` only, when given: read for it alone)."""
    now = ctx.clock.now_ms()
    counts, attempts = await asyncio.gather(
        ctx.store.console.count_by_state(one),
        ctx.store.console.recent_attempts(now - LATENESS_WINDOW_MS, one),
    )
    items = []
    for biz in bizes:
        mine = {state: n for (name, state), n in counts.items() if name == biz.biz_type}
        theirs = [a for a in attempts if a.biz_type == biz.biz_type]
        items.append(biz_stats(biz, mine, theirs, now))
    return items


@router.get(
    "/stats",
    summary="Per biz type: jobs by state, outcomes of the last minute, lateness p99",
    response_model=StatsOut,
    dependencies=[requires(Role.VIEWER)],
)
async def stats(ctx: Context, grant: GrantDep) -> Response:
    bizes = await visible_biz_types(ctx.store.biz_types, grant)
    at = ctx.clock.now_ms()
    return JSONResponse({"at": at, "items": await stats_of(ctx, bizes, None)})


@router.get(
    "/biz-types/{biz_type}/stats",
    summary="One biz type's stats",
    response_model=BizStatsOut,
    responses=problems(404, 422),
    dependencies=[requires(Role.VIEWER, "path")],
)
async def biz_type_stats(ctx: Context, biz_type: BizTypePath) -> Response:
    biz = await ctx.store.biz_types.get_biz_type(biz_type)
    if biz is None:
        raise Problem(404, f"No biz type {biz_type!r}.")
    [item] = await stats_of(ctx, [biz], biz_type)
    return JSONResponse(item)


@router.get(
    "/biz-types/{biz_type}/series",
    summary="One biz type's last hour, per minute: delivered, failed, lateness p50 / p99",
    description=(
        "Sixty one-minute points, aligned to the minute, the last one still filling; from"
        " the attempts the store keeps on each job (all of them, while the job is retained)."
        " Lateness is of first attempts of jobs registered at or before their due time."
    ),
    response_model=SeriesOut,
    responses=problems(404, 422),
    dependencies=[requires(Role.VIEWER, "path")],
)
async def biz_type_series(ctx: Context, biz_type: BizTypePath) -> Response:
    if await ctx.store.biz_types.get_biz_type(biz_type) is None:
        raise Problem(404, f"No biz type {biz_type!r}.")
    now = ctx.clock.now_ms()
    attempts = await ctx.store.console.recent_attempts(series_start(now), biz_type)
    return JSONResponse({"biz_type": biz_type, "at": now, **minute_series(attempts, now)})
