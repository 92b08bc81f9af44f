"""/v1/schedules: recurring schedules whose occurrences become ordinary jobs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from timer_service.access import Role
from timer_service.api.access import GrantDep, requires
from timer_service.api.bodies import BODY, encode_checked, invalid, read_json, validate
from timer_service.api.context import Context, SchedulerDep
from timer_service.api.docs import json_body, problems
from timer_service.api.problems import Problem
from timer_service.api.schemas import ScheduleIn
from timer_service.audit import AuditAction
from timer_service.constants import BIZ_TYPE_PATTERN, JOB_ID_PATTERN, MIN_CYCLE_INTERVAL_MS
from timer_service.errors import InvalidInput
from timer_service.schedules import Catchup, ScheduleSpec, check_schedule_id

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]
ScheduleIdPath = Annotated[str, Path(pattern=JOB_ID_PATTERN)]


class ScheduleOut(BaseModel):
    biz_type: str
    schedule_id: str
    cron: str | None
    timezone: str | None
    intervals_ms: list[int] | None
    cycle: bool | None
    payload: Any
    start_at: int | None
    end_at: int | None
    max_runs: int | None
    paused: bool
    catchup: str
    next_run_at: int | None
    runs: int
    last_run_at: int | None
    last_job_id: str | None
    created_at: int
    updated_at: int


class ScheduleListOut(BaseModel):
    items: list[ScheduleOut]


def _check_cycle(request: ScheduleIn) -> None:
    """A cycling list never ends: each gap at least `MIN_CYCLE_INTERVAL_MS` (a finite list
    may be finer: it makes at most `MAX_INTERVALS` jobs)."""
    if not request.cycle or not request.intervals_ms:
        return
    errors = [
        {
            "loc": [*BODY, "intervals_ms", i],
            "msg": f"must be at least {MIN_CYCLE_INTERVAL_MS} ms in a cycling schedule",
        }
        for i, gap in enumerate(request.intervals_ms)
        if gap < MIN_CYCLE_INTERVAL_MS
    ]
    if errors:
        raise invalid(errors)


router = APIRouter(prefix="/v1", tags=["schedules"], responses=problems(401, 500))


def spec_from(data: Any, max_payload_bytes: int) -> ScheduleSpec:
    """A schedule body as the scheduler takes it; raises Problem (422 or 413)."""
    request = validate(ScheduleIn, data)
    _check_cycle(request)
    payload_json = encode_checked(request.payload, max_payload_bytes, [*BODY, "payload"])
    try:
        return ScheduleSpec(
            cron=request.cron,
            timezone=request.timezone,
            intervals_ms=tuple(request.intervals_ms) if request.intervals_ms else None,
            cycle=request.cycle,
            payload_json=payload_json,
            start_at=request.start_at,
            end_at=request.end_at,
            max_runs=request.max_runs,
            paused=request.paused,
            catchup=Catchup(request.catchup),
        )
    except InvalidInput as exc:
        raise Problem.invalid([*BODY, *exc.loc], str(exc)) from None


@router.put(
    "/schedules/{biz_type}/{schedule_id}",
    summary="Create or replace a recurring schedule",
    response_model=ScheduleOut,
    responses={
        201: {"model": ScheduleOut, "description": "Created"},
        **problems(400, 413, 415, 422),
    },
    openapi_extra=json_body(ScheduleIn),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def put_schedule(
    ctx: Context,
    scheduler: SchedulerDep,
    biz_type: BizTypePath,
    schedule_id: ScheduleIdPath,
    request: Request,
) -> Response:
    try:
        check_schedule_id(schedule_id)
    except InvalidInput as exc:
        raise Problem.invalid(["path", *exc.loc], str(exc)) from None
    spec = spec_from(await read_json(request), ctx.settings.max_payload_bytes)
    if await ctx.store.biz_types.get_biz_type(biz_type) is None:
        raise Problem.invalid(["path", "biz_type"], f"unknown biz type {biz_type!r}")
    result = await scheduler.put(biz_type, schedule_id, spec)
    await ctx.audit(
        request,
        AuditAction.SCHEDULE_PUT,
        biz_type,
        detail={"schedule_id": schedule_id, "created": result.created},
    )
    if result.schedule.next_run_at is not None:
        ctx.jobs_written([result.schedule.next_run_at // 1000])
    if not result.created:
        return JSONResponse(result.schedule.to_public())
    location = {"Location": f"/v1/schedules/{biz_type}/{schedule_id}"}
    return JSONResponse(result.schedule.to_public(), 201, headers=location)


@router.get(
    "/schedules",
    summary="List schedules, of one biz type or all",
    response_model=ScheduleListOut,
    responses=problems(422),
    dependencies=[requires(Role.VIEWER, "query")],
)
async def list_schedules(
    scheduler: SchedulerDep,
    grant: GrantDep,
    biz_type: Annotated[str | None, Query(pattern=BIZ_TYPE_PATTERN)] = None,
) -> Response:
    items = grant.visible(await scheduler.list(biz_type), lambda s: s.biz_type)
    return JSONResponse({"items": [s.to_public() for s in items]})


@router.get(
    "/schedules/{biz_type}/{schedule_id}",
    summary="Read a schedule and where it stands",
    response_model=ScheduleOut,
    responses=problems(404, 422),
    dependencies=[requires(Role.VIEWER, "path")],
)
async def get_schedule(
    scheduler: SchedulerDep, biz_type: BizTypePath, schedule_id: ScheduleIdPath
) -> Response:
    schedule = await scheduler.get(biz_type, schedule_id)
    if schedule is None:
        raise Problem(404, f"No schedule {schedule_id!r} of biz type {biz_type!r}.")
    return JSONResponse(schedule.to_public())


@router.delete(
    "/schedules/{biz_type}/{schedule_id}",
    summary="Delete a schedule; its pending next occurrence is cancelled",
    status_code=204,
    response_class=Response,
    responses=problems(404, 422),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def delete_schedule(
    ctx: Context,
    scheduler: SchedulerDep,
    biz_type: BizTypePath,
    schedule_id: ScheduleIdPath,
    request: Request,
) -> Response:
    if not await scheduler.delete(biz_type, schedule_id):
        raise Problem(404, f"No schedule {schedule_id!r} of biz type {biz_type!r}.")
    detail = {"schedule_id": schedule_id}
    await ctx.audit(request, AuditAction.SCHEDULE_DELETE, biz_type, detail=detail)
    return Response(status_code=204)
