"""The keyword arguments of the calls that take a resource's fields (`put_biz_type(b,
callback_url=..., burst=...)`), defined once as TypedDicts: `mypy --strict` checks every
name and type at the caller, and `named` refuses a misspelt one at run time (TypeError,
as Python does for any unknown keyword argument)."""

# No `from __future__ import annotations`: Python 3.11 finds `Required` in a TypedDict
# only in evaluated annotations.
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Required, TypedDict

from timer_service.client.bodies import Body, plain
from timer_service.client.models import RetryPolicy, When


class RetryFields(TypedDict, total=False):
    max_attempts: int
    initial_backoff_ms: int
    max_backoff_ms: int
    multiplier: float


class BizTypeFields(TypedDict, total=False):
    """`put_biz_type`: only `callback_url` is required; an absent field takes its default."""

    callback_url: Required[str]
    rate_limit_per_s: float | None
    burst: int
    max_concurrency: int
    timeout_ms: int
    retry: RetryPolicy | RetryFields
    signing_secret: str | None
    paused: bool
    registration_rate_per_s: float | None
    registration_burst: int | None


class BizTypePatch(TypedDict, total=False):
    """`patch_biz_type`, a JSON Merge Patch: an absent field keeps its value; None resets
    an optional one to its default (`signing_secret=None` removes the secret)."""

    callback_url: str
    rate_limit_per_s: float | None
    burst: int | None
    max_concurrency: int | None
    timeout_ms: int | None
    retry: RetryPolicy | RetryFields | None
    signing_secret: str | None
    paused: bool | None
    registration_rate_per_s: float | None
    registration_burst: int | None


class ScheduleFields(TypedDict, total=False):
    """`put_schedule`: exactly one of `cron` (with `timezone`) and `intervals_ms`."""

    cron: str
    timezone: str
    intervals_ms: list[int] | tuple[int, ...]
    cycle: bool
    payload: object
    start_at: When
    end_at: When
    max_runs: int
    paused: bool
    catchup: Literal["skip", "one", "all"]


@dataclass(frozen=True, slots=True)
class Names:
    required: frozenset[str]
    known: frozenset[str]

    @classmethod
    def of(cls, fields: type) -> "Names":
        attrs = vars(fields)  # a TypedDict's key sets, which mypy does not model
        required = frozenset[str](attrs["__required_keys__"])
        return cls(required, required | attrs["__optional_keys__"])


BIZ_TYPE = Names.of(BizTypeFields)
BIZ_TYPE_PATCH = Names.of(BizTypePatch)
SCHEDULE = Names.of(ScheduleFields)


def named(given: Mapping[str, object], names: Names) -> Body:
    """`given` as a body (datetimes in epoch ms, models dumped), its names checked."""
    unknown = sorted(set(given) - names.known)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {unknown}; known: {sorted(names.known)}")
    missing = sorted(names.required - set(given))
    if missing:
        raise TypeError(f"missing keyword arguments {missing}")
    return {key: plain(value) for key, value in given.items()}
