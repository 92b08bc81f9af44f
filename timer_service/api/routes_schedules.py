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
from timer_service.api.schemas import JobOut, ScheduleIn
from timer_service.audit import AuditAction
from timer_service.constants import BIZ_TYPE_PATTERN, JOB_ID_PATTERN, MIN_CYCLE_INTERVAL_MS
from timer_service.errors import InvalidInput
from timer_service.jobs import CreateStatus
from timer_service.model import second_of
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


@router.post(
    "/schedules/{biz_type}/{schedule_id}/run-now",
    summary="Run a schedule now: one extra occurrence due now",
    description=(
        "Creates the job `{schedule_id}:{now ms}` with the schedule's payload, due now,"
        " paused schedule or not. The next occurrence, `runs` and `max_runs` are left as"
        " they are. 201 with the job (200 if a run-now of the same millisecond made it)."
        " Recorded in the audit log."
    ),
    status_code=201,
    response_model=JobOut,
    responses=problems(404, 409, 422),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def run_schedule_now(
    ctx: Context,
    scheduler: SchedulerDep,
    biz_type: BizTypePath,
    schedule_id: ScheduleIdPath,
    request: Request,
) -> Response:
    result = await scheduler.run_now(biz_type, schedule_id)
    created = result.status is CreateStatus.CREATED
    if created:
        ctx.jobs_written([second_of(result.job.due_at)])
    detail = {"schedule_id": schedule_id, "job_id": result.job.job_id}
    await ctx.audit(
        request, AuditAction.SCHEDULE_RUN_NOW, biz_type, job_id=result.job.job_id, detail=detail
    )
    return JSONResponse(result.job.to_public(), 201 if created else 200)


@router.post(
    "/schedules/{biz_type}/{schedule_id}/skip-next",
    summary="Skip a schedule's next occurrence",
    description=(
        "Cancels the next occurrence's job while it waits and moves `next_run_at` to the"
        " occurrence after it (not counted in `runs`). 409 when the schedule has no next"
        " occurrence (paused or over) or its job is already dispatched. Recorded in the"
        " audit log with the skipped occurrence."
    ),
    response_model=ScheduleOut,
    responses=problems(404, 409, 422),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def skip_next_occurrence(
    ctx: Context,
    scheduler: SchedulerDep,
    biz_type: BizTypePath,
    schedule_id: ScheduleIdPath,
    request: Request,
) -> Response:
    skipped, schedule = await scheduler.skip_next(biz_type, schedule_id)
    detail = {"schedule_id": schedule_id, "skipped": skipped, "next_run_at": schedule.next_run_at}
    await ctx.audit(request, AuditAction.SCHEDULE_SKIP_NEXT, biz_type, detail=detail)
    return JSONResponse(schedule.to_public())
