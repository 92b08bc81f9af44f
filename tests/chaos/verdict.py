"""What a chaos run proves, from what the receiver saw, the cancels' answers, the faults'
times and the store's final states. Pure: no I/O, unit-tested in tests/unit.

Definitions (docs/architecture.md, "Fault tests and the chaos run"):

- lost: accepted, not cancelled, and never answered 2xx by the receiver.
- stuck: not in a final state (delivered, dead, cancelled) when the run ends.
- early: a first attempt received before its due time (or sent before it, by its
  `fired_at`), or a retry received before the earliest moment the contract allows after
  the previous attempt's answer.
- after cancel: a callback received after a DELETE of its job was answered 200.
- duplicate: a callback repeating an attempt number already received for its job, or any
  callback after the job's 2xx answer. A repeat means the first copy's outcome was not
  yet durable when the second was marked (the send mark takes only a job with no outcome
  since its claim), so the first was still in flight, from its send to the second's:
  the duplicate is explained by a fault whose window overlaps that stretch, "on the
  wire" when the fault began before the first copy's answer (or it never got one),
  "outcome pending" when after. None overlaps: unexplained. (When the outcome became
  durable cannot be seen from outside; a frozen store holds it back for a minute.)
- rate limit: over every interval between two sends of the limited biz type (by
  `fired_at`), sends ≤ burst + rate x (interval + 1 ms): the 1 ms is the timestamps'
  resolution.
"""

from __future__ import annotations

import email.utils
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.chaos.receiver import Call

TIMESTAMP_RESOLUTION_MS = 1
FINAL_STATES = frozenset({"delivered", "dead", "cancelled"})


@dataclass(frozen=True)
class Fault:
    name: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class Cancel:
    job_id: str
    sent_ms: int
    answered_ms: int
    status: int | None  # None: no answer (the API was unreachable)


@dataclass(frozen=True)
class Backoff:
    initial_ms: int
    max_ms: int
    multiplier: float

    def after(self, attempt: int) -> int:
        return int(min(self.max_ms, self.initial_ms * self.multiplier ** (attempt - 1)))


@dataclass(frozen=True)
class RateLimit:
    biz_type: str
    per_s: float
    burst: int


@dataclass(frozen=True)
class Duplicate:
    job_id: str
    attempt: int
    original: Call
    copy: Call
    fault: Fault | None

    @property
    def cause(self) -> str:
        if self.fault is None:
            return "unexplained"
        answered = self.original.answered_ms
        on_wire = answered is None or self.fault.start_ms <= answered
        return f"{self.fault.name} ({'on the wire' if on_wire else 'outcome pending'})"


@dataclass(frozen=True)
class RateExcess:
    biz_type: str
    sends: int
    window_ms: int
    bound: float
    start_ms: int = 0  # the first send of the window


@dataclass
class Report:
    jobs: int
    lost: list[str] = field(default_factory=list)
    stuck: dict[str, str] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    after_cancel: list[str] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    rate_excess: list[RateExcess] = field(default_factory=list)
    cancels: dict[str, int] = field(default_factory=dict)  # answer -> how many
    lateness_ms: dict[str, float] = field(default_factory=dict)
    first_attempts: list[Call] = field(default_factory=list)  # of the unlimited biz types
    earliest_fired_minus_due_ms: int | None = None

    @property
    def unexplained_duplicates(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.fault is None]

    def summary(self) -> dict[str, object]:
        causes: dict[str, int] = {}
        for d in self.duplicates:
            causes[d.cause] = causes.get(d.cause, 0) + 1
        return {
            "jobs": self.jobs,
            "lost": len(self.lost),
            "stuck": len(self.stuck),
            "dead": len(self.dead),
            "early": len(self.early),
            "after_200_cancel": len(self.after_cancel),
            "duplicates": len(self.duplicates),
            "duplicate_causes": causes,
            "rate_excess": len(self.rate_excess),
            "cancels": self.cancels,
            "lateness_ms": self.lateness_ms,
            "earliest_fired_minus_due_ms": self.earliest_fired_minus_due_ms,
        }


def judge(
    jobs: Mapping[str, int],
    calls: list[Call],
    cancels: list[Cancel],
    faults: list[Fault],
    final_states: Mapping[str, str],
    backoff: Backoff,
    rate_limits: Iterable[RateLimit] = (),
) -> Report:
    """`jobs`: job_id -> due_at of every accepted job; `final_states`: job_id -> state."""
    report = Report(len(jobs))
    cancelled = {c.job_id: c for c in cancels if c.status == 200}
    for c in cancels:
        answer = "no answer" if c.status is None else str(c.status)
        report.cancels[answer] = report.cancels.get(answer, 0) + 1
    by_job: dict[str, list[Call]] = {}
    for call in sorted(calls, key=lambda c: c.received_ms):
        by_job.setdefault(call.job_id, []).append(call)
    for job_id in jobs:
        state = final_states.get(job_id, "missing")
        if state not in FINAL_STATES:
            report.stuck[job_id] = state
        if state == "dead":
            report.dead.append(job_id)
        accepted = any(c.accepted for c in by_job.get(job_id, ()))
        if not accepted and state != "cancelled":
            report.lost.append(job_id)
    for job_id, job_calls in by_job.items():
        report.early += _early(job_calls, backoff)
        report.duplicates += _duplicates(job_id, job_calls, faults)
        cancel = cancelled.get(job_id)
        if cancel is not None:
            report.after_cancel += [
                f"{job_id} attempt {c.attempt} received {c.received_ms - cancel.answered_ms} ms "
                "after its 200 cancel"
                for c in job_calls
                if c.received_ms > cancel.answered_ms
            ]
    limited = {r.biz_type for r in rate_limits}
    for limit in rate_limits:
        sends = sorted(c.fired_at for c in calls if c.biz_type == limit.biz_type)
        report.rate_excess += rate_excess(limit, sends)
    report.first_attempts = [  # the first copy of each job's attempt 1
        job_calls[0]
        for job_calls in by_job.values()
        if job_calls[0].attempt == 1 and job_calls[0].biz_type not in limited
    ]
    report.lateness_ms = lateness(report.first_attempts)
    if calls:
        report.earliest_fired_minus_due_ms = min(c.fired_at - c.due_at for c in calls)
    return report


def _early(job_calls: list[Call], backoff: Backoff) -> list[str]:
    found = []
    by_attempt: dict[int, Call] = {}
    for call in job_calls:
        by_attempt.setdefault(call.attempt, call)
    for call in job_calls:
        if call.attempt == 1:
            ahead = call.due_at - min(call.received_ms, call.fired_at)
            if ahead > 0:
                found.append(f"{call.job_id} attempt 1 went out {ahead} ms before due")
            continue
        previous = by_attempt.get(call.attempt - 1)
        if previous is None:
            continue  # the previous attempt never reached us: its answer time is unknown
        not_before = retry_not_before_ms(previous, backoff)
        if call.received_ms < not_before:
            found.append(
                f"{call.job_id} attempt {call.attempt} received {not_before - call.received_ms}"
                f" ms before its retry was allowed (after {previous.reply}, {hint_of(previous)})"
            )
    return found


def hint_of(call: Call) -> str:
    return (
        "no Retry-After" if call.retry_after is None else f"Retry-After {call.retry_after[:20]!r}"
    )


def retry_not_before_ms(previous: Call, backoff: Backoff) -> int:
    """The earliest the contract lets the next attempt go, from what we know of the previous
    one: its outcome was known no earlier than our answer (or, when we hung, than the
    request's arrival), and the wait counts from then."""
    known_at = previous.answered_ms if previous.answered_ms is not None else previous.received_ms
    hint = previous.retry_after
    if previous.answered_ms is not None and hint is not None:
        hint = hint.strip()
        if hint.isascii() and hint.isdigit():
            return known_at + min(backoff.max_ms, int(hint) * 1000 if len(hint) < 13 else 10**15)
        try:
            when = email.utils.parsedate_to_datetime(hint)
        except (TypeError, ValueError, IndexError, OverflowError):
            when = None
        if when is not None and when.tzinfo is not None:
            return min(max(known_at, int(when.timestamp() * 1000)), known_at + backoff.max_ms)
    return known_at + backoff.after(previous.attempt)


def _duplicates(job_id: str, job_calls: list[Call], faults: list[Fault]) -> list[Duplicate]:
    found = []
    first_of: dict[int, Call] = {}
    delivered_by: Call | None = None
    for call in job_calls:
        original = delivered_by or first_of.get(call.attempt)
        if original is not None:
            cause = _cause(original, call, faults)
            found.append(Duplicate(job_id, call.attempt, original, call, cause))
        else:
            first_of[call.attempt] = call
            if call.accepted:
                delivered_by = call
    return found


def _cause(original: Call, copy: Call, faults: list[Fault]) -> Fault | None:
    """The first fault while the original was in flight: from its send to the copy's."""
    for fault in faults:
        if fault.start_ms <= copy.fired_at and fault.end_ms >= original.fired_at:
            return fault
    return None


def rate_excess(limit: RateLimit, sends_ms: list[int]) -> list[RateExcess]:
    """The worst excess starting at each send, over every interval that exceeds the bound."""
    found = []
    for i, start in enumerate(sends_ms):
        worst: RateExcess | None = None
        for j in range(i, len(sends_ms)):
            window_ms = sends_ms[j] - start
            bound = limit.burst + limit.per_s * (window_ms + TIMESTAMP_RESOLUTION_MS) / 1000
            count = j - i + 1
            if count > bound and (worst is None or count - bound > worst.sends - worst.bound):
                worst = RateExcess(limit.biz_type, count, window_ms, bound, start)
        if worst is not None:
            found.append(worst)
    return found


def lateness(firsts: list[Call]) -> dict[str, float]:
    late = sorted(c.received_ms - c.due_at for c in firsts)
    if not late:
        return {}
    q = statistics.quantiles(late, n=100) if len(late) > 1 else [float(late[0])] * 99
    return {"n": len(late), "p50": q[49], "p99": q[98], "max": late[-1], "min": late[0]}
