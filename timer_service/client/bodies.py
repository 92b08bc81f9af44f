"""The request bodies the SDK sends: times as the API reads them, a `job_id` on every create."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TypeAlias

from pydantic import BaseModel

from timer_service.client.models import UNCHANGED, JobSpec, When

Body: TypeAlias = dict[str, object]


def new_job_id() -> str:
    return uuid.uuid4().hex


def to_epoch_ms(when: When) -> int | str:
    """Epoch ms and RFC 3339 strings pass through; an aware datetime becomes epoch ms."""
    if not isinstance(when, datetime):
        return when
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"naive datetime {when.isoformat()}: give it a timezone")
    return round(when.timestamp() * 1000)


def plain(value: object) -> object:
    """A value as JSON carries it: models dumped, datetimes in epoch ms, mappings copied."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return to_epoch_ms(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def given(**fields: object) -> Body:
    """The fields given: None means "not given" (a PUT's absent field takes its default)."""
    return {key: plain(value) for key, value in fields.items() if value is not None}


def patched(**fields: object) -> Body:
    """A JSON Merge Patch: UNCHANGED fields are left out, None is sent (resets to default)."""
    return {key: plain(value) for key, value in fields.items() if value is not UNCHANGED}


def exactly_one_time(due_at: object, delay_ms: object) -> None:
    if (due_at is None) == (delay_ms is None):
        raise ValueError("give exactly one of due_at and delay_ms")


def create_body(spec: JobSpec) -> Body:
    """A create's body, with a `job_id` generated when none is given: a create is then
    idempotent, so a retry after a lost answer creates nothing twice."""
    exactly_one_time(spec.due_at, spec.delay_ms)
    return {
        "biz_type": spec.biz_type,
        "job_id": spec.job_id or new_job_id(),
        **given(
            due_at=None if spec.due_at is None else to_epoch_ms(spec.due_at),
            delay_ms=spec.delay_ms,
            payload=spec.payload,
            labels=spec.labels,
            window_ms=spec.window_ms,
        ),
    }


def batch_item(item: JobSpec | Mapping[str, object]) -> Body:
    """One item of `jobs:batch` from a `JobSpec` or a dict of its fields."""
    if isinstance(item, Mapping):
        body = {str(key): plain(value) for key, value in item.items()}
        body["job_id"] = body.get("job_id") or new_job_id()
        return body
    return create_body(item)


def reschedule_body(due_at: When | None, delay_ms: int | None, payload: object) -> Body:
    exactly_one_time(due_at, delay_ms)
    body: Body = {"due_at": to_epoch_ms(due_at)} if due_at is not None else {}
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    if payload is not UNCHANGED:
        body["payload"] = payload
    return body
