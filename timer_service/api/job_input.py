"""Parsing a create or reschedule request body into what the registrar and the store
take: validation only; what a job may become is decided in `timer_service.jobs`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from timer_service import jobs as machine
from timer_service.api.bodies import BODY, encode_checked, validate
from timer_service.api.problems import Loc, Problem
from timer_service.api.schemas import JobCreateIn, JobPatchIn
from timer_service.errors import InvalidInput
from timer_service.jobs import NewJob
from timer_service.model import labels_of
from timer_service.tracecontext import TraceContext


@dataclass(frozen=True, slots=True)
class Limits:
    max_payload_bytes: int
    horizon_ms: int


def parse_due(
    due_at: int | None, delay_ms: int | None, now_ms: int, limits: Limits, loc: Loc
) -> int:
    """`jobs.resolve_due`, its refusal a 422 at the field it names under `loc`."""
    try:
        return machine.resolve_due(due_at, delay_ms, now_ms, limits.horizon_ms)
    except InvalidInput as exc:
        raise Problem.invalid([*loc, *exc.loc], str(exc)) from None


def parse_create(
    data: Any, now_ms: int, limits: Limits, loc: Loc = BODY, trace: TraceContext | None = None
) -> NewJob:
    """Validate one create body; raises Problem (422 or 413). `trace`: the request's
    trace context, kept with the job for its callbacks."""
    request = validate(JobCreateIn, data, loc)
    due = parse_due(request.due_at, request.delay_ms, now_ms, limits, loc)
    payload_json = encode_checked(request.payload, limits.max_payload_bytes, [*loc, "payload"])
    return NewJob(
        biz_type=request.biz_type,
        job_id=request.job_id if request.job_id is not None else uuid.uuid4().hex,
        due_at=due,
        payload_json=payload_json,
        compare_due=request.due_at is not None,
        trace=trace,
        labels=labels_of(request.labels),
        window_ms=request.window_ms,
    )


@dataclass(frozen=True, slots=True)
class Reschedule:
    due_at: int
    payload_json: str | None  # None keeps the current payload


def parse_reschedule(data: Any, now_ms: int, limits: Limits) -> Reschedule:
    """Validate one reschedule body; raises Problem (422 or 413)."""
    request = validate(JobPatchIn, data)
    due = parse_due(request.due_at, request.delay_ms, now_ms, limits, BODY)
    payload_json = None
    if "payload" in request.model_fields_set:
        payload_json = encode_checked(request.payload, limits.max_payload_bytes, [*BODY, "payload"])
    return Reschedule(due, payload_json)
