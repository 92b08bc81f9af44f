"""/v1/jobs: create (one or a batch), read, list, cancel, reschedule, replay."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from timer_service.access import Role
from timer_service.api.access import GrantDep, check_biz_type, requires
from timer_service.api.bodies import BODY, UNKNOWN_FIELD, invalid, read_json
from timer_service.api.context import ApiContext, Context, SchedulerDep
from timer_service.api.docs import OVER_QUOTA_RESPONSES, json_body, problems
from timer_service.api.job_input import parse_create, parse_reschedule
from timer_service.api.lateness import job_with_lateness
from timer_service.api.problems import Problem
from timer_service.api.schemas import (
    MAX_INT,
    BatchOut,
    JobBatchIn,
    JobCreateIn,
    JobDetailOut,
    JobOut,
    JobPageOut,
    JobPatchIn,
)
from timer_service.audit import AuditAction
from timer_service.biz_hold import deleted_meanwhile
from timer_service.constants import (
    BIZ_TYPE_PATTERN,
    BIZ_TYPE_RE,
    DEFAULT_LIST_LIMIT,
    JOB_ID_PATTERN,
    JOB_ID_RE,
    LABEL_KEY_PATTERN,
    MAX_BATCH_ITEMS,
    MAX_LABEL_VALUE_CHARS,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    RESERVED_BIZ_TYPE_PREFIX,
)
from timer_service.errors import InvalidInput
from timer_service.jobs import CreateStatus, NewJob
from timer_service.model import Job, JobState, Labels, is_reserved, labels_of, split_key
from timer_service.search import JobFilter
from timer_service.tracecontext import TraceContext

log = logging.getLogger(__name__)

LABEL_KEY_RE = re.compile(LABEL_KEY_PATTERN)

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]
JobIdPath = Annotated[str, Path(pattern=JOB_ID_PATTERN)]

_STATUS = {CreateStatus.CREATED: 201, CreateStatus.EXISTS: 200, CreateStatus.CONFLICT: 409}
# A cursor past every job of the reserved biz types, whose keys sort together: "_" is
# before every letter and after every digit, and nothing of theirs reaches "\uffff".
PAST_RESERVED = RESERVED_BIZ_TYPE_PREFIX + "\uffff"

_CONFLICT_DETAIL = "A job with this identity exists with a different due_at, payload or labels."


def job_location(job: Job) -> str:
    return f"/v1/jobs/{job.biz_type}/{job.job_id}"


def request_trace(request: Request) -> TraceContext | None:
    """The trace context jobs created by this request keep (set by api.observe)."""
    trace = request.state.trace if hasattr(request.state, "trace") else None
    return trace if isinstance(trace, TraceContext) else None


def job_response(job: Job, status: int = 200) -> Response:
    return JSONResponse(job.to_public(), status)


router = APIRouter(prefix="/v1", tags=["jobs"], responses=problems(401, 500))


@router.post(
    "/jobs",
    summary="Create a job (idempotent on biz_type + job_id)",
    status_code=201,
    response_model=JobOut,
    responses={
        200: {"model": JobOut, "description": "The same job existed already"},
        **problems(400, 409, 413, 415, 422),
        **OVER_QUOTA_RESPONSES,
    },
    openapi_extra=json_body(JobCreateIn),
    dependencies=[requires(Role.PRODUCER, "body")],
)
async def create_job(ctx: Context, request: Request, grant: GrantDep) -> Response:
    data = await read_json(request)
    now = ctx.clock.now_ms()
    job = parse_create(data, now, ctx.job_limits, trace=request_trace(request))
    check_biz_type(grant, job.biz_type)
    [result] = await ctx.registrar.register([job], now)
    if isinstance(result, InvalidInput):
        raise Problem.invalid([*BODY, *result.loc], str(result))
    status = _STATUS[result.status]
    if status == 409:
        raise Problem(409, _CONFLICT_DETAIL)
    response = job_response(result.job, status)
    if status == 201:
        response.headers["Location"] = job_location(result.job)
    return response


@router.post(
    "/jobs:batch",
    summary="Create up to 1000 jobs; one result per item, in request order",
    response_model=BatchOut,
    responses={**problems(400, 413, 415, 422), **OVER_QUOTA_RESPONSES},
    openapi_extra=json_body(JobBatchIn),
    dependencies=[requires(Role.PRODUCER, "body")],
)
async def create_jobs(ctx: Context, request: Request, grant: GrantDep) -> Response:
    items = _batch_items(await read_json(request))
    # An item outside the token's biz types refuses the whole batch (403, nothing
    # written): the contract's per-item statuses are about the items' data, and a
    # batch half-written for a caller acting beyond its rights helps nobody.
    for item in items:
        named = item.get("biz_type") if isinstance(item, dict) else None
        if isinstance(named, str):
            check_biz_type(grant, named)
    now = ctx.clock.now_ms()
    trace = request_trace(request)
    results: list[dict[str, Any] | None] = [None] * len(items)
    accepted: list[tuple[int, NewJob]] = []
    for i, item in enumerate(items):
        try:
            accepted.append((i, parse_create(item, now, ctx.job_limits, (*BODY, "jobs", i), trace)))
        except Problem as problem:
            results[i] = {"status": problem.status, "error": problem.body()}
    written = await ctx.registrar.register([job for _, job in accepted], now)
    for (i, _), result in zip(accepted, written, strict=True):
        if isinstance(result, InvalidInput):
            error = Problem.invalid((*BODY, "jobs", i, *result.loc), str(result))
            results[i] = {"status": 422, "error": error.body()}
            continue
        status = _STATUS[result.status]
        if status == 409:
            results[i] = {"status": 409, "error": Problem(409, _CONFLICT_DETAIL).body()}
        else:
            results[i] = {"status": status, "job": result.job.to_public()}
    return JSONResponse({"results": results})


@router.get(
    "/jobs",
    summary="Search jobs, in identity order",
    description=(
        "Every filter given must match: `label=key:value` may repeat; `due_after` is"
        " inclusive and `due_before` exclusive, both epoch ms on `due_at`. A page holds at"
        " most `limit` jobs and may end short when a filter scans (docs/api.md,"
        ' "Search"): follow `next_cursor` until it is null.'
    ),
    response_model=JobPageOut,
    responses=problems(422),
    dependencies=[requires(Role.VIEWER, "query")],
)
async def list_jobs(
    ctx: Context,
    grant: GrantDep,
    biz_type: Annotated[str | None, Query(pattern=BIZ_TYPE_PATTERN)] = None,
    state: JobState | None = None,
    label: Annotated[list[str] | None, Query(description="key:value; may repeat")] = None,
    job_id_prefix: Annotated[str | None, Query(pattern=JOB_ID_PATTERN)] = None,
    due_after: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    due_before: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
    cursor: Annotated[
        str | None,
        Query(
            max_length=1024,
            description="`next_cursor` of the page before; anything else is a 422.",
        ),
    ] = None,
) -> Response:
    if cursor:
        check_cursor(cursor, biz_type)
    if due_after is not None and due_before is not None and due_after >= due_before:
        raise Problem.invalid(["query", "due_after"], "must be before due_before")
    if biz_type is None:
        biz_type = grant.only_biz_type  # a token of one biz type lists it alone, fast
    where = JobFilter(
        biz_type=biz_type,
        states=None if state is None else frozenset({state}),
        labels=label_filter(label or []),
        job_id_prefix=job_id_prefix,
        due_after=due_after,
        due_before=due_before,
    )
    try:
        jobs, next_cursor = await business_jobs(ctx, where, limit, cursor or None)
    except (InvalidInput, ValueError):
        raise Problem.invalid(["query", "cursor"], "is not a cursor this API gave") from None
    # Without a filter, a page shows only the token's biz types; it may then end short,
    # as any filtered page may (docs/api.md, "Search"): next_cursor goes on.
    visible = grant.visible(jobs, lambda job: job.biz_type)
    items = [job.to_public(answers=False) for job in visible]  # a page stays small
    return JSONResponse({"items": items, "next_cursor": next_cursor})


@router.get(
    "/jobs/{biz_type}/{job_id}",
    summary="Read a job, with its attempt history and why it is late",
    response_model=JobDetailOut,
    responses=problems(404, 422),
    dependencies=[requires(Role.VIEWER, "path")],
)
async def get_job(ctx: Context, biz_type: BizTypePath, job_id: JobIdPath) -> Response:
    job = await ctx.store.jobs.get_job(biz_type, job_id)
    if job is None:
        raise Problem(404, f"No job {job_id!r} of biz type {biz_type!r}.")
    return JSONResponse(await job_with_lateness(ctx, job))


@router.delete(
    "/jobs/{biz_type}/{job_id}",
    summary="Cancel a job (pending, dispatched or already cancelled)",
    response_model=JobOut,
    responses=problems(404, 409, 422),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def cancel_job(
    ctx: Context,
    scheduler: SchedulerDep,
    biz_type: BizTypePath,
    job_id: JobIdPath,
    request: Request,
) -> Response:
    job = await ctx.store.jobs.cancel_job(biz_type, job_id, ctx.clock.now_ms())
    await ctx.audit(request, AuditAction.JOB_CANCEL, biz_type, job_id=job_id)
    try:
        await scheduler.on_cancelled(biz_type, job_id)
    except Exception:  # the cancel is done; the schedule's repair mends the rest
        log.exception("schedule not advanced past a cancelled occurrence")
    return job_response(job)


@router.patch(
    "/jobs/{biz_type}/{job_id}",
    summary="Reschedule a pending job (and replace its payload if given)",
    response_model=JobOut,
    responses=problems(400, 404, 409, 413, 415, 422),
    openapi_extra=json_body(JobPatchIn),
    dependencies=[requires(Role.PRODUCER, "path")],
)
async def reschedule_job(
    ctx: Context, biz_type: BizTypePath, job_id: JobIdPath, request: Request
) -> Response:
    data = await read_json(request)
    now = ctx.clock.now_ms()
    change = parse_reschedule(data, now, ctx.job_limits)
    job = await ctx.store.jobs.reschedule_job(
        biz_type, job_id, change.due_at, change.payload_json, now
    )
    ctx.jobs_written([(job.next_attempt_at or job.due_at) // 1000])
    detail = {"due_at": job.due_at, "payload_replaced": change.payload_json is not None}
    await ctx.audit(request, AuditAction.JOB_RESCHEDULE, biz_type, job_id=job_id, detail=detail)
    return job_response(job)


@router.post(
    "/jobs/{biz_type}/{job_id}/replay",
    summary="Make a dead job pending again, now, with a fresh attempt budget",
    description="404 for an unknown job, or a biz type that is deleted (or deleted meanwhile).",
    response_model=JobOut,
    responses=problems(404, 409, 422),
    dependencies=[requires(Role.OPERATOR, "path")],
)
async def replay_job(
    ctx: Context, biz_type: BizTypePath, job_id: JobIdPath, request: Request
) -> Response:
    # A dead job of a deleted biz type stays dead: replayed, nobody would consume it.
    if await ctx.store.biz_types.get_biz_type(biz_type) is None:
        raise Problem(404, f"No biz type {biz_type!r}.")
    now = ctx.clock.now_ms()
    job = await ctx.store.jobs.replay_job(biz_type, job_id, now)
    if await deleted_meanwhile(ctx.store.biz_types, ctx.store.jobs, [biz_type], [job], now):
        raise Problem(404, f"No biz type {biz_type!r}.")
    await ctx.audit(request, AuditAction.JOB_REPLAY, biz_type, job_id=job_id)
    ctx.jobs_written([(job.next_attempt_at or now) // 1000])
    return job_response(job)


async def business_jobs(
    ctx: ApiContext, where: JobFilter, limit: int, cursor: str | None
) -> tuple[list[Job], str | None]:
    """A page of the search without the service's own jobs (the canary's). Theirs sort
    together, so a page that ends among them goes on from past them: at most one more
    search, never a run of empty pages over the thousands the canary keeps."""
    jobs, next_cursor = await ctx.store.console.search_jobs(where, limit, cursor)
    if where.biz_type is not None:
        return jobs, next_cursor
    mine = [job for job in jobs if not is_reserved(job.biz_type)]
    if next_cursor is not None and is_reserved(split_key(next_cursor)[0]):
        more, next_cursor = await ctx.store.console.search_jobs(
            where, limit - len(mine), PAST_RESERVED
        )
        mine.extend(more)
    return mine, next_cursor


def check_cursor(cursor: str, biz_type: str | None) -> None:
    """A cursor is the key of the last job of a page (`<biz_type>/<job_id>`), of the biz
    type filtered on when there is one: anything else was not given by this API (422,
    not an empty page that looks like the end)."""
    cursor_biz, slash, cursor_job = cursor.partition("/")
    issued = bool(slash) and BIZ_TYPE_RE.match(cursor_biz) and JOB_ID_RE.match(cursor_job)
    if not issued or (biz_type is not None and cursor_biz != biz_type):
        msg = "is not a cursor this API gave (pass next_cursor back, with the same filters)"
        raise Problem.invalid(["query", "cursor"], msg)


def label_filter(terms: list[str]) -> Labels:
    """`label=key:value` query terms as labels; 422 at `label` for a malformed one."""
    pairs: dict[str, str] = {}
    for term in terms:
        key, sep, value = term.partition(":")
        if not sep or not LABEL_KEY_RE.match(key) or len(value) > MAX_LABEL_VALUE_CHARS:
            raise Problem.invalid(
                ["query", "label"],
                f"{term!r} is not key:value (key {LABEL_KEY_PATTERN}, value at most"
                f" {MAX_LABEL_VALUE_CHARS} characters)",
            )
        if pairs.get(key, value) != value:
            raise Problem.invalid(["query", "label"], f"gives {key!r} two values")
        pairs[key] = value
    if len(pairs) > MAX_LABELS:
        raise Problem.invalid(["query", "label"], f"at most {MAX_LABELS} labels")
    return labels_of(pairs)


def _batch_items(data: Any) -> list[Any]:
    if not isinstance(data, dict):
        raise Problem.invalid(BODY, "must be a JSON object")
    unknown = [key for key in data if key != "jobs"]
    if unknown:
        raise invalid([{"loc": [*BODY, key], "msg": UNKNOWN_FIELD} for key in unknown])
    items = data.get("jobs")
    if not isinstance(items, list):
        raise Problem.invalid([*BODY, "jobs"], "must be a list of jobs")
    if not 1 <= len(items) <= MAX_BATCH_ITEMS:
        raise Problem.invalid(
            [*BODY, "jobs"], f"must hold 1 to {MAX_BATCH_ITEMS} jobs, not {len(items)}"
        )
    return items
