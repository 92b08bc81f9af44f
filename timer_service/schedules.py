"""Recurring schedules, the domain: the spec, its occurrences and the catch-up rule. No I/O.

An occurrence is an instant (epoch ms). Its job is ``"{schedule_id}:{occurrence_ms}"``,
so the same occurrence always names the same job, whoever computes it.

Cron expressions are evaluated on the wall clock of the schedule's zone and each
wall time is then mapped to an instant:

- a wall time that does not exist (spring forward) fires once, at the first valid
  moment after the gap (02:30 in New York on a spring-forward day fires at 03:00);
- a wall time that happens twice (fall back) fires once, at its first pass.

Interval schedules count each gap from the previous occurrence's due time: the
occurrences are ``anchor + intervals[0]``, ``+ intervals[1]``, ... (cycling when
``cycle``), where the anchor is ``start_at`` or the time of the PUT.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from timer_service.constants import JOB_ID_PATTERN
from timer_service.errors import InvalidInput
from timer_service.model import job_key

# Occurrence job ids are "<schedule_id>:<epoch ms>" and job ids hold at most 128
# characters; 13 digits of epoch ms last until the year 2286.
OCCURRENCE_MS_DIGITS = 13
MAX_SCHEDULE_ID_LEN = 128 - 1 - OCCURRENCE_MS_DIGITS
MAX_INTERVALS = 1000
MAX_CRON_LEN = 256
MAX_MS = 10**OCCURRENCE_MS_DIGITS - 1

# An occurrence less than this late when the one before it is dispatched is not
# "missed": it goes out at once, whatever the catch-up policy (the contract's
# on-time bound is 1 s).
LATE_GRACE_MS = 1000

# A fall-back hour of an every-second cron is 3600 wall times that already fired;
# anything beyond this many candidates means an expression that cannot fire.
_MAX_CANDIDATES = 20_000

_OCCURRENCE_RE = re.compile(r"^(.+):(\d{1,16})$")
_SCHEDULE_ID_RE = re.compile(JOB_ID_PATTERN)
_CRON_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


class Catchup(StrEnum):
    SKIP = "skip"  # after an outage or pause, only future occurrences
    ONE = "one"  # one job for the latest missed occurrence, then future ones
    ALL = "all"  # every missed occurrence, at once one after another


def occurrence_job_id(schedule_id: str, occurrence_ms: int) -> str:
    return f"{schedule_id}:{occurrence_ms}"


def parse_occurrence(job_id: str) -> tuple[str, int] | None:
    """(schedule_id, occurrence ms) of an occurrence job id; None for any other job."""
    match = _OCCURRENCE_RE.match(job_id)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def schedule_key(biz_type: str, schedule_id: str) -> str:
    return job_key(biz_type, schedule_id)


def check_schedule_id(schedule_id: str) -> None:
    if _SCHEDULE_ID_RE.match(schedule_id) is None:
        raise InvalidInput(f"must match {JOB_ID_PATTERN}", loc=("schedule_id",))
    if len(schedule_id) > MAX_SCHEDULE_ID_LEN:
        raise InvalidInput(
            f"must be at most {MAX_SCHEDULE_ID_LEN} characters: occurrence job ids are "
            f"'<schedule_id>:<epoch ms>' and job ids at most 128",
            loc=("schedule_id",),
        )


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {name!r}", loc=("timezone",)) from None


def _cron_fields(expr: str) -> str:
    """The expression normalised for croniter; only 5 fields, 6 (seconds first) or an alias."""
    text = " ".join(expr.split())
    if text.lower() in _CRON_ALIASES:
        return text.lower()
    count = len(text.split(" ")) if text else 0
    if count not in (5, 6):
        raise InvalidInput(
            f"must have 5 fields, or 6 with seconds first; got {count}", loc=("cron",)
        )
    return text


def _croniter(expr: str, start: datetime) -> croniter:
    return croniter(expr, start, second_at_beginning=True)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a PUT says; validated on construction (InvalidInput names the field)."""

    cron: str | None = None
    timezone: str | None = None  # cron only; "UTC" when not given
    intervals_ms: tuple[int, ...] | None = None
    cycle: bool | None = None  # intervals only; False when not given
    payload_json: str = "null"
    start_at: int | None = None
    end_at: int | None = None
    max_runs: int | None = None
    paused: bool = False
    catchup: Catchup = Catchup.SKIP
    _prefix_ms: tuple[int, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.intervals_ms is None):
            which = "both" if self.cron is not None else "neither"
            raise InvalidInput(
                f"give exactly one of cron and intervals_ms ({which} given)", loc=("cron",)
            )
        if self.cron is not None:
            self._check_cron()
        else:
            self._check_intervals()
        if self.max_runs is not None and self.max_runs < 1:
            raise InvalidInput("must be at least 1", loc=("max_runs",))
        for name in ("start_at", "end_at"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_MS:
                raise InvalidInput(f"must be between 0 and {MAX_MS}", loc=(name,))
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise InvalidInput("must not be before start_at", loc=("end_at",))

    def _check_cron(self) -> None:
        assert self.cron is not None
        if self.cycle is not None:
            raise InvalidInput("applies to intervals_ms only", loc=("cycle",))
        if len(self.cron) > MAX_CRON_LEN:
            raise InvalidInput(f"must be at most {MAX_CRON_LEN} characters", loc=("cron",))
        expr = _cron_fields(self.cron)
        object.__setattr__(self, "cron", expr)
        object.__setattr__(self, "timezone", self.timezone or "UTC")
        zone(self.timezone or "UTC")
        try:
            _croniter(expr, datetime(2026, 1, 1)).get_next(datetime)
        except CroniterBadDateError:
            raise InvalidInput("never fires", loc=("cron",)) from None
        except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
            raise InvalidInput(f"is not a valid cron expression: {exc}", loc=("cron",)) from None

    def _check_intervals(self) -> None:
        assert self.intervals_ms is not None
        if self.timezone is not None:
            raise InvalidInput("applies to cron only", loc=("timezone",))
        if not 1 <= len(self.intervals_ms) <= MAX_INTERVALS:
            raise InvalidInput(f"must hold 1 to {MAX_INTERVALS} intervals", loc=("intervals_ms",))
        for i, gap in enumerate(self.intervals_ms):
            if not 1 <= gap <= MAX_MS:
                raise InvalidInput(f"must be between 1 and {MAX_MS}", loc=("intervals_ms", i))
        object.__setattr__(self, "cycle", bool(self.cycle))
        object.__setattr__(self, "_prefix_ms", tuple(itertools.accumulate(self.intervals_ms)))

    def same_rule(self, other: ScheduleSpec) -> bool:
        """Equal in everything but `paused`: a PUT that only pauses or resumes."""
        return replace(self, paused=False) == replace(other, paused=False)

    def to_public(self) -> dict[str, Any]:
        return {
            "cron": self.cron,
            "timezone": self.timezone,
            "intervals_ms": list(self.intervals_ms) if self.intervals_ms is not None else None,
            "cycle": self.cycle,
            "payload": json.loads(self.payload_json),
            "start_at": self.start_at,
            "end_at": self.end_at,
            "max_runs": self.max_runs,
            "paused": self.paused,
            "catchup": self.catchup.value,
        }


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule: its spec and where it stands."""

    biz_type: str
    schedule_id: str
    spec: ScheduleSpec
    anchor_at: int  # start_at, or the time of the PUT that set this rule
    next_run_at: int | None  # the occurrence whose job exists (or is being created)
    runs: int = 0  # occurrences dispatched
    last_run_at: int | None = None  # the occurrence (due time) dispatched last
    last_job_id: str | None = None
    created_at: int = 0
    updated_at: int = 0

    @property
    def key(self) -> str:
        return schedule_key(self.biz_type, self.schedule_id)

    def job_id(self, occurrence_ms: int) -> str:
        return occurrence_job_id(self.schedule_id, occurrence_ms)

    def to_public(self) -> dict[str, Any]:
        return {
            "biz_type": self.biz_type,
            "schedule_id": self.schedule_id,
            **self.spec.to_public(),
            "next_run_at": self.next_run_at,
            "runs": self.runs,
            "last_run_at": self.last_run_at,
            "last_job_id": self.last_job_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def evolve(self, **changes: Any) -> Schedule:
        return replace(self, **changes)


# -- occurrences -------------------------------------------------------------------


def _exact_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _local(ms: int, tz: ZoneInfo) -> datetime:
    """The naive wall time at instant `ms` in `tz`."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.astimezone(tz).replace(tzinfo=None, fold=0)


def wall_to_ms(wall: datetime, tz: ZoneInfo) -> int:
    """The instant a wall time fires: its first pass when repeated, the end of the
    gap when skipped."""
    first = wall.replace(tzinfo=tz, fold=0)
    ms = _exact_ms(first)
    if _local(ms, tz) == wall:
        return ms  # exists; fold=0 is the first of two passes when it is repeated
    # In a gap, fold=1 reads the wall time with the offset after the transition
    # (an instant before it) and fold=0 with the one before (an instant after it).
    lo = _exact_ms(wall.replace(tzinfo=tz, fold=1))
    hi = ms
    if lo > hi:
        lo, hi = hi, lo
    # Bisect for the transition instant: the first ms whose offset differs from `lo`'s.
    lo_offset = _offset_at(lo, tz)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(mid, tz) == lo_offset:
            lo = mid
        else:
            hi = mid
    return hi


def _offset_at(ms: int, tz: ZoneInfo) -> timedelta | None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.astimezone(tz).utcoffset()


def _cron_after(expr: str, tz: ZoneInfo, after_ms: int) -> int | None:
    """The first cron instant strictly after `after_ms`."""
    wall = _local(after_ms, tz)
    it = _croniter(expr, wall)
    for _ in range(_MAX_CANDIDATES):
        try:
            candidate = wall_to_ms(it.get_next(datetime), tz)
        except CroniterBadDateError:
            return None
        if candidate > after_ms:
            return candidate
    return None


def _cron_at_or_before(expr: str, tz: ZoneInfo, at_ms: int) -> int | None:
    """The last cron instant at or before `at_ms` (a wall time maps no later than
    the wall clock that reached it, so the first candidate is the answer)."""
    wall = _local(at_ms, tz) + timedelta(microseconds=1)
    try:
        return wall_to_ms(_croniter(expr, wall).get_prev(datetime), tz)
    except CroniterBadDateError:
        return None


def _intervals_after(spec: ScheduleSpec, anchor_ms: int, after_ms: int) -> int | None:
    prefix = spec._prefix_ms
    offset = after_ms - anchor_ms
    if offset < prefix[0]:
        return anchor_ms + prefix[0]
    total = prefix[-1]
    if not spec.cycle:
        i = bisect.bisect_right(prefix, offset)
        return anchor_ms + prefix[i] if i < len(prefix) else None
    laps, rest = divmod(offset, total)
    return anchor_ms + laps * total + prefix[bisect.bisect_right(prefix, rest)]


def _intervals_at_or_before(spec: ScheduleSpec, anchor_ms: int, at_ms: int) -> int | None:
    prefix = spec._prefix_ms
    offset = at_ms - anchor_ms
    if offset < prefix[0]:
        return None
    if not spec.cycle:
        return anchor_ms + prefix[bisect.bisect_right(prefix, offset) - 1]
    laps, rest = divmod(offset, prefix[-1])
    i = bisect.bisect_right(prefix, rest)
    return anchor_ms + laps * prefix[-1] + (prefix[i - 1] if i else 0)


def next_occurrence(spec: ScheduleSpec, anchor_ms: int, after_ms: int, runs: int = 0) -> int | None:
    """The first occurrence strictly after `after_ms`, or None when the schedule is over
    (`max_runs` reached, past `end_at`, or a finite interval list used up)."""
    if spec.max_runs is not None and runs >= spec.max_runs:
        return None
    if spec.cron is not None:
        # From start_at on, or strictly after the PUT that set the rule: like the
        # first occurrence that PUT computed, which was strictly after its now.
        lower = max(after_ms, anchor_ms - 1 if spec.start_at is not None else anchor_ms)
        found = _cron_after(spec.cron, zone(spec.timezone or "UTC"), lower)
    else:
        found = _intervals_after(spec, anchor_ms, after_ms)
    if found is None or (spec.end_at is not None and found > spec.end_at) or found > MAX_MS:
        return None
    return found


def last_occurrence(spec: ScheduleSpec, anchor_ms: int, at_ms: int) -> int | None:
    """The last occurrence at or before `at_ms` (ignoring max_runs), within start and end."""
    if spec.end_at is not None:
        at_ms = min(at_ms, spec.end_at)
    if spec.cron is not None:
        found = _cron_at_or_before(spec.cron, zone(spec.timezone or "UTC"), at_ms)
        return found if found is not None and found >= anchor_ms else None
    return _intervals_at_or_before(spec, anchor_ms, at_ms)


def plan_after(
    spec: ScheduleSpec, anchor_ms: int, done_ms: int | None, runs: int, now_ms: int
) -> int | None:
    """The occurrence to create next, once occurrence `done_ms` went out (None: none has
    yet), applying the catch-up policy to what was missed by `now_ms`."""
    after = anchor_ms - 1 if done_ms is None else max(done_ms, anchor_ms - 1)
    following = next_occurrence(spec, anchor_ms, after, runs)
    if following is None or following >= now_ms - LATE_GRACE_MS:
        return following
    if spec.catchup is Catchup.ALL:
        return following
    if spec.catchup is Catchup.ONE:
        return last_occurrence(spec, anchor_ms, now_ms) or following
    return next_occurrence(spec, anchor_ms, now_ms - LATE_GRACE_MS - 1, runs)
