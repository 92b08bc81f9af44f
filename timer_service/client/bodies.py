"""The request bodies the SDK sends: times as the API reads them, a `job_id` on every create."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from timer_service.client.models import UNCHANGED


def new_job_id() -> str:
    return uuid.uuid4().hex


def to_epoch_ms(when: int | str | datetime) -> int | str:
    """Epoch ms and RFC 3339 strings pass through; an aware datetime becomes epoch ms."""
    if not isinstance(when, datetime):
        return when
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"naive datetime {when.isoformat()}: give it a timezone")
    return round(when.timestamp() * 1000)


def plain(value: Any) -> Any:
    """A value as JSON carries it: models dumped, datetimes in epoch ms."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return to_epoch_ms(value)
    return value


def plain_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {key: plain(value) for key, value in fields.items()}


def exactly_one_time(due_at: object, delay_ms: object) -> None:
    if (due_at is None) == (delay_ms is None):
        raise ValueError("give exactly one of due_at and delay_ms")


def create_body(
    biz_type: str,
    due_at: int | str | datetime | None,
    delay_ms: int | None,
    payload: Any,
    job_id: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"biz_type": biz_type, "job_id": job_id or new_job_id()}
    if due_at is not None:
        body["due_at"] = to_epoch_ms(due_at)
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    if payload is not None:
        body["payload"] = payload
    return body


def batch_item(item: Mapping[str, Any] | Any) -> dict[str, Any]:
    """One item of `jobs:batch` from a dict, a `JobSpec` or any object with its fields."""
    if isinstance(item, Mapping):
        body = plain_fields(item)
        body["job_id"] = body.get("job_id") or new_job_id()
        return body
    return create_body(
        item.biz_type,
        getattr(item, "due_at", None),
        getattr(item, "delay_ms", None),
        getattr(item, "payload", None),
        getattr(item, "job_id", None),
    )


def reschedule_body(
    due_at: int | str | datetime | None, delay_ms: int | None, payload: Any
) -> dict[str, Any]:
    exactly_one_time(due_at, delay_ms)
    body: dict[str, Any] = {"due_at": to_epoch_ms(due_at)} if due_at is not None else {}
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    if payload is not UNCHANGED:
        body["payload"] = payload
    return body
