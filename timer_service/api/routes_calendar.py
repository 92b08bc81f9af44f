"""`GET /v1/calendar`: how many pending jobs are due in each step of a range, from the
counts of the index of non-empty seconds (docs/api.md, "Load calendar and flexible
windows"), never from the jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from timer_service.access import Role
from timer_service.api.access import GrantDep, forbidden, requires
from timer_service.api.context import Context
from timer_service.api.docs import problems
from timer_service.api.schemas import MAX_INT
from timer_service.calendar import MAX_STEPS, calendar_query, per_step
from timer_service.constants import BIZ_TYPE_PATTERN

router = APIRouter(prefix="/v1", tags=["calendar"], responses=problems(401, 500))


class CalendarBucketOut(BaseModel):
    at: int = Field(description="The step's start, epoch ms.")
    due: int = Field(description="Pending jobs whose next attempt falls in the step.")


class CalendarOut(BaseModel):
    step_ms: int
    buckets: list[CalendarBucketOut]


_DOC = (
    f"For each step of `[from, to)` (at most {MAX_STEPS} steps), how many `pending` jobs"
    " are due in it (their next attempt: a flexible job's chosen `fire_at`, a retry's"
    " `next_attempt_at`), as the store holds them at the time of the call. Answered from"
    " the counts kept on the index of non-empty seconds, never by reading jobs: the cost"
    " is one index entry per non-empty second of the range. The index counts by the"
    " second: `from` is taken down and `to` up to a whole second, and `step_ms` must be a"
    " multiple of 1000. `biz_type` limits the counts to one biz type; a token that covers"
    " some biz types only must name one (or covers exactly one, which is then used)."
)


@router.get(
    "/calendar",
    summary="The load calendar: pending jobs due per step",
    description=_DOC,
    response_model=CalendarOut,
    responses=problems(403, 422),
    dependencies=[requires(Role.VIEWER, "query")],
)
async def calendar(
    ctx: Context,
    grant: GrantDep,
    from_ms: Annotated[int, Query(alias="from", ge=0, le=MAX_INT, description="Epoch ms.")],
    to_ms: Annotated[int, Query(alias="to", ge=0, le=MAX_INT, description="Epoch ms, exclusive.")],
    step_ms: Annotated[int, Query(ge=1000, le=MAX_INT)] = 60_000,
    biz_type: Annotated[str | None, Query(pattern=BIZ_TYPE_PATTERN)] = None,
) -> Response:
    if biz_type is None and not grant.unrestricted:
        biz_type = grant.only_biz_type
        if biz_type is None:
            raise forbidden(f"Token {grant.name!r} covers some biz types only: name a biz_type.")
    query = calendar_query(from_ms, to_ms, step_ms, biz_type)
    due = await ctx.store.calendar.due_by_second(query.from_s, query.to_s, biz_type)
    return JSONResponse({"step_ms": query.step_ms, "buckets": query.buckets(per_step(query, due))})
