"""The job state machine: every rule about how a job may change, in one place.

Each event (create, cancel, reschedule, replay, claim, reclaim, start-sending,
outcome) is a pure function of the job (or of what the caller knows of it) that
returns a `Change`, or raises a domain error. A `Change` says which fields take
which values and records at most one attempt, guarded by the state (and claim)
the job must still be in when the store applies it. Store adapters apply
changes as they are told: the in-memory store evolves the job, the MongoDB
store turns the guard into a query filter and the fields into ``$set``. Neither
decides a transition itself (docs/architecture.md, "The job state machine").

    pending --claim--> dispatched --outcome: retry--> pending
       |                   |  \\--outcome: delivered--> delivered
       |                   |   \\-outcome: dead-------> dead --replay--> pending
       +--cancel--> cancelled <--cancel (callback not started)
    pending --reschedule--> pending
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from timer_service.dispatch import Claimed, Outcome, OutcomeKind
from timer_service.errors import CallbackInFlight, Conflict, InvalidInput, PayloadTooLarge
from timer_service.model import (
    ACTIVE_STATES,
    FINAL_STATES,
    Attempt,
    Job,
    JobState,
    Labels,
    canonical_json,
    encode_payload,
    job_key,
    same_payload,
    second_of,
)
from timer_service.responses import RESPONSES_KEPT, keep_last
from timer_service.tracecontext import TraceContext

# --------------------------------------------------------------------------- create


@dataclass(frozen=True, slots=True)
class NewJob:
    """A create request, validated."""

    biz_type: str
    job_id: str
    due_at: int
    payload_json: str
    # False when the request gave delay_ms: an existing job then matches on payload only.
    compare_due: bool = True
    trace: TraceContext | None = None  # the registration's W3C trace context, if valid
    labels: Labels = ()
    window_ms: int = 0
    # The moment chosen in the window (`Registrar`, by the calendar); None: due_at.
    fire_at: int | None = None

    @property
    def key(self) -> str:
        return job_key(self.biz_type, self.job_id)


class CreateStatus(StrEnum):
    CREATED = "created"  # 201
    EXISTS = "exists"  # 200: same identity, same due_at and payload
    CONFLICT = "conflict"  # 409: same identity, different due_at or payload


@dataclass(frozen=True, slots=True)
class CreateResult:
    status: CreateStatus
    job: Job


def resolve_due(due_at: int | None, delay_ms: int | None, now_ms: int, horizon_ms: int) -> int:
    """The due time from exactly one of an absolute time and a delay from now (the
    server's clock); never beyond the horizon. A time in the past fires at once."""
    if (due_at is None) == (delay_ms is None):
        which = "both" if due_at is not None else "neither"
        raise InvalidInput(
            f"exactly one of due_at and delay_ms is required ({which} given)", ("due_at",)
        )
    field_name = "due_at" if due_at is not None else "delay_ms"
    due = due_at if due_at is not None else now_ms + (delay_ms or 0)
    if due > now_ms + horizon_ms:
        days = horizon_ms // 86_400_000
        raise InvalidInput(f"is beyond the horizon of {days} days from now", (field_name,))
    return due


def payload_json_within(payload: object, max_bytes: int) -> str:
    """The payload's stored JSON text. InvalidInput for a value JSON cannot carry
    (a lone surrogate, a non-finite number); PayloadTooLarge over the limit."""
    try:
        text = encode_payload(payload)
        size = len(text) if text.isascii() else len(text.encode())
    except UnicodeEncodeError:  # "\ud800" is valid JSON text but no UTF-8 string
        raise InvalidInput("must not hold a lone surrogate (\\ud800-\\udfff)") from None
    except ValueError:  # a number too large for a double (1e400) decodes to inf
        raise InvalidInput("must hold only finite numbers") from None
    if size > max_bytes:
        raise PayloadTooLarge(f"The payload is {size} bytes encoded; the limit is {max_bytes}.")
    return text


def new_job(new: NewJob, now_ms: int) -> Job:
    """The job a create makes: pending, first attempt at its due time (at the moment
    chosen in its window, for a flexible job)."""
    return Job(
        biz_type=new.biz_type,
        job_id=new.job_id,
        due_at=new.due_at,
        payload_json=new.payload_json,
        state=JobState.PENDING,
        attempts=0,
        next_attempt_at=new.due_at if new.fire_at is None else new.fire_at,
        window_ms=new.window_ms,
        fire_at=new.fire_at,
        created_at=now_ms,
        updated_at=now_ms,
        trace=new.trace,
        labels=new.labels,
    )


def payload_fingerprint(payload_json: str) -> str:
    """A digest of the payload that equal JSON values share whatever their spelling."""
    return hashlib.sha256(canonical_json(payload_json).encode()).hexdigest()


def repeat_status(existing: Job, new: NewJob) -> CreateStatus:
    """A create of an identity that exists: the same request again, or a conflict.
    Labels compare like the payload: a different labels object is a conflict. A window
    compares by its width, never by the moment chosen in it (another create may well
    choose another)."""
    same_due = not new.compare_due or existing.due_at == new.due_at
    if (
        same_due
        and existing.window_ms == new.window_ms
        and existing.labels == new.labels
        and same_payload(existing.payload_json, new.payload_json)
    ):
        return CreateStatus.EXISTS
    return CreateStatus.CONFLICT


def repeat_status_by_fingerprint(
    due_at: int, fingerprint: str, labels: Labels, new: NewJob, window_ms: int = 0
) -> CreateStatus:
    """`repeat_status` when only the due time, payload fingerprint, labels and window
    are known."""
    same_due = not new.compare_due or due_at == new.due_at
    same = same_due and labels == new.labels and window_ms == new.window_ms
    if same and fingerprint == payload_fingerprint(new.payload_json):
        return CreateStatus.EXISTS
    return CreateStatus.CONFLICT


# --------------------------------------------------------------------------- changes


@dataclass(frozen=True, slots=True)
class Guard:
    """What the job must still be when a change is applied: one of `states`; when
    `claim` is given, dispatched under that claim token; when `idle`, with no
    callback started, or only the one of `sending` (the same send mark again: a
    retry after a lost reply); when `unrecorded_at` is given, with no attempt of
    that time in its history (the change records it once, however often it is
    written)."""

    states: frozenset[JobState]
    claim: str | None = None
    idle: bool = False
    sending: str | None = None
    unrecorded_at: int | None = None

    def holds(self, job: Job) -> bool:
        if job.state not in self.states:
            return False
        if self.idle and job.sending is not None and job.sending != self.sending:
            return False
        if self.unrecorded_at is not None and any(a.at == self.unrecorded_at for a in job.history):
            return False
        return self.claim is None or job.claim == self.claim


@dataclass(frozen=True, slots=True)
class Change:
    """Field values to set on a job (and an attempt to record), under a guard."""

    guard: Guard
    sets: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    attempt: Attempt | None = None

    @property
    def state(self) -> JobState | None:
        """The state the job ends in, if the change sets one."""
        state = self.sets.get("state")
        return None if state is None else JobState(state)

    @property
    def finishes(self) -> bool:
        """The job ends in a final state: it starts its retention period."""
        return self.state in FINAL_STATES

    @property
    def next_second(self) -> int | None:
        """The second the job fires in next, when the change moves it there."""
        if "next_attempt_at" not in self.sets:
            return None
        at = self.sets["next_attempt_at"]
        return None if at is None else second_of(at)

    def apply(self, job: Job) -> Job:
        """The job after the change (the caller checked the guard)."""
        changed = job.evolve(**self.sets)
        if self.attempt is not None:
            changed = changed.evolve(
                attempts=changed.attempts + 1,
                history=with_answers_kept((*changed.history, self.attempt)),
            )
        return changed


def without_answers(job: Job) -> Job:
    """The job as a listing shows it: its attempts without the endpoint's answers."""
    if all(a.response is None for a in job.history):
        return job
    return job.evolve(history=tuple(replace(a, response=None) for a in job.history))


def with_answers_kept(history: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """The history with the answers of all but its last RESPONSES_KEPT answered
    attempts let go: what a job keeps of its endpoint's answers is bounded."""
    kept = keep_last([a.response for a in history], RESPONSES_KEPT)
    if all(keep or a.response is None for a, keep in zip(history, kept, strict=True)):
        return history
    return tuple(
        a if keep or a.response is None else replace(a, response=None)
        for a, keep in zip(history, kept, strict=True)
    )


def _change(states: frozenset[JobState], claim: str | None = None, /, **sets: Any) -> Change:
    return Change(Guard(states, claim), MappingProxyType(sets))


_PENDING = frozenset({JobState.PENDING})
_DISPATCHED = frozenset({JobState.DISPATCHED})
_DEAD = frozenset({JobState.DEAD})
_CANCELLED = frozenset({JobState.CANCELLED})

# --------------------------------------------------------------------------- API events


def cancel(job: Job, now_ms: int) -> Change | None:
    """pending | dispatched (no callback started) -> cancelled; None when it is
    cancelled already. Conflict when delivered or dead; CallbackInFlight once a
    broker has started its callback (a retry makes it pending, cancellable, again).
    The guard holds the cancel to that: a callback started after the job was read
    makes the write miss, and the caller reads again."""
    if job.state == JobState.CANCELLED:
        return None
    if job.state not in ACTIVE_STATES:
        raise Conflict(f"job is {job.state.value}")
    if job.sending is not None:
        raise CallbackInFlight(
            "the job's callback has started; if it fails and is retried, the job is"
            " pending again and can be cancelled"
        )
    return Change(
        Guard(ACTIVE_STATES, idle=True),
        MappingProxyType(
            {
                "state": JobState.CANCELLED,
                "next_attempt_at": None,
                "claim": None,
                "updated_at": now_ms,
            }
        ),
    )


WITHDRAWN = "withdrawn: its biz type was deleted as this job was created or replayed"


def withdraw(job: Job, now_ms: int) -> Change | None:
    """pending | dispatched -> cancelled: a job whose create or replay found, after
    writing it, that its biz type had been deleted meanwhile (the request is refused;
    timer_service/biz_hold.py). Unlike a cancel it does not
    wait for a callback that has started: that attempt, if any, goes out once and is
    recorded (`outcome_after_cancel`), and no retry follows, since no broker would
    consume one. None when the job is final already."""
    if job.state not in ACTIVE_STATES:
        return None
    return Change(
        Guard(ACTIVE_STATES),
        MappingProxyType(
            {
                "state": JobState.CANCELLED,
                "next_attempt_at": None,
                "claim": None,
                "last_error": WITHDRAWN,
                "updated_at": now_ms,
            }
        ),
    )


def reschedule(job: Job, due_at: int, payload_json: str | None, now_ms: int) -> Change:
    """A pending job moves to `due_at` (and takes the new payload, if given)."""
    if job.state != JobState.PENDING:
        raise Conflict(f"only a pending job can be rescheduled; this one is {job.state.value}")
    # A new due time fires at that time: the window was used once, at the creation.
    sets: dict[str, Any] = {
        "due_at": due_at,
        "next_attempt_at": due_at,
        "fire_at": None,
        "updated_at": now_ms,
    }
    if payload_json is not None:
        sets["payload_json"] = payload_json
    return _change(_PENDING, **sets)


def replayed(job: Job) -> bool:
    """The job is pending or dispatched by a replay whose first attempt has not ended:
    `budget_base` is set only by a replay, to the attempts made until then, so no
    attempt has been recorded since the last replay exactly when they are equal (a
    dead job has made at least one attempt)."""
    return job.state in ACTIVE_STATES and 0 < job.budget_base == job.attempts


def replay(job: Job, now_ms: int) -> Change | None:
    """dead -> pending now, with a fresh budget of attempts (history keeps counting).

    None (no change, the job as it is answers) when the job is still where a replay
    put it (`replayed`): a client that retries a replay whose reply it lost must
    not get 409 for a replay that went through. A second replay by someone else
    meanwhile is answered the same way, which is what it asked for. Once an attempt
    of the replayed job has ended (or it was cancelled) the replay is done and a new
    one is judged by the state: 409 unless dead."""
    if replayed(job):
        return None
    if job.state != JobState.DEAD:
        raise Conflict(f"only a dead job can be replayed; this one is {job.state.value}")
    return _change(
        _DEAD,
        state=JobState.PENDING,
        next_attempt_at=now_ms,
        budget_base=job.attempts,
        claim=None,
        updated_at=now_ms,
    )


# --------------------------------------------------------------------------- dispatch events


def claimable(job: Job, upto_ms: int, fence: int) -> bool:
    """A claim round under `fence` takes the pending jobs due by `upto_ms` that no
    daemon with a higher fence has claimed."""
    return (
        job.state == JobState.PENDING
        and job.next_attempt_at is not None
        and job.next_attempt_at <= upto_ms
        and job.fence <= fence
    )


def claim(claim_token: str, fence: int, now_ms: int) -> Change:
    """pending -> dispatched under a claim token and the claiming daemon's fence."""
    return _change(
        _PENDING,
        state=JobState.DISPATCHED,
        claim=claim_token,
        fence=fence,
        claimed_at=now_ms,
        sending=None,
        updated_at=now_ms,
    )


def reclaim(
    old_claim: str, claim_token: str, fence: int, now_ms: int, seen_sending: str | None = None
) -> Change:
    """A dispatched job whose message went missing gets a new claim (and message).

    `seen_sending`: the send mark the reconciler judged by (None: no send had
    started). A broker that marked the job since then holds it after all (a
    redelivered message took it over), so the reclaim must miss."""
    return Change(
        Guard(_DISPATCHED, old_claim, idle=True, sending=seen_sending),
        MappingProxyType(
            {
                "claim": claim_token,
                "fence": fence,
                "claimed_at": now_ms,
                # whoever had started the callback is gone: it goes out again
                "sending": None,
            }
        ),
    )


def start_sending(claim_token: str, send_token: str, now_ms: int, retake: bool = False) -> Change:
    """A broker is about to send the callback of a job dispatched under this claim,
    that no cancel and no other message of the claim got to first. After it, a
    cancel answers "in flight".

    `retake`: the message was redelivered, which the queue does only once the
    channel that held it before is gone (its broker died or lost its connection,
    and drops what it held): whoever had started the callback will not finish it,
    so this message takes the send over (a duplicate only if that callback was
    already on the wire).

    Idempotent: the same mark again (same `send_token`, a retry after a lost
    reply) holds and answers the job as marked, so the retrying broker sends what
    its first call marked instead of dropping it."""
    return Change(
        Guard(_DISPATCHED, claim_token, idle=not retake, sending=send_token),
        MappingProxyType({"sending": send_token, "updated_at": now_ms}),
    )


# A message carries its job (`Claimed.job`) only with a payload up to this many
# characters: a herd claimed ahead of its publishing is held in the daemon's memory
# (100,000 jobs: ~180 B each for the job's fields, plus the payload), and in the queue.
CARRIED_PAYLOAD_CHARS = 1024


def claimed(job: Job, second: int, carry: bool = False) -> Claimed:
    """What the daemon publishes for a job it has just claimed. With `carry`, the job
    itself when its payload is small: for a store whose send mark would otherwise read
    it back (MongoDB); the in-memory store's mark has it at hand, and carrying it cost
    the herd bench's daemon and broker ~14 % more CPU per job there."""
    carried = carry and len(job.payload_json) <= CARRIED_PAYLOAD_CHARS
    assert job.next_attempt_at is not None and job.claim is not None
    return Claimed(
        biz_type=job.biz_type,
        job_id=job.job_id,
        second=second,
        due_at=job.due_at,
        next_attempt_at=job.next_attempt_at,
        attempt=job.attempts + 1,
        claim=job.claim,
        fence=job.fence,
        claimed_at=job.claimed_at or 0,
        traceparent=None if job.trace is None else job.trace.traceparent,
        job=job.evolve(history=()) if carried else None,
    )


# --------------------------------------------------------------------------- outcomes


def outcome(result: Outcome, now_ms: int) -> Change:
    """The attempt's record, and where the job goes, while it is still dispatched
    under the claim the attempt was made for: a retry is a new timer, delivered and
    dead are final. An outcome for another claim changes nothing."""
    claim_token = result.ref.claim
    if result.kind == OutcomeKind.RETRY:
        assert result.next_attempt_at is not None
        sets: dict[str, Any] = {
            "state": JobState.PENDING,
            "next_attempt_at": result.next_attempt_at,
            "claim": None,
        }
    elif result.kind == OutcomeKind.DELIVERED:
        sets = {"state": JobState.DELIVERED, "next_attempt_at": None, "claim": None}
        sets["delivered_at"] = now_ms
    else:
        sets = {"state": JobState.DEAD, "next_attempt_at": None, "claim": None}
    sets["updated_at"] = now_ms
    sets["sending"] = None
    sets["last_error"] = None if result.kind == OutcomeKind.DELIVERED else result.attempt.error
    return Change(Guard(_DISPATCHED, claim_token), MappingProxyType(sets), result.attempt)


def outcome_after_cancel(result: Outcome, now_ms: int) -> Change:
    """What an outcome whose `outcome` change missed does to a job cancelled while its
    callback was in flight: the job keeps its state and gets the attempt's record, once
    per attempt (known by its time), so a write retried after a lost reply records
    nothing more. A job in another state is left alone (the outcome is stale)."""
    return Change(
        Guard(_CANCELLED, unrecorded_at=result.attempt.at),
        MappingProxyType({"last_error": result.attempt.error, "updated_at": now_ms}),
        result.attempt,
    )
