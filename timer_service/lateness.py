"""Why a job is late: what an open job waits for, where a final job's lateness arose.

A pure judgement (docs/api.md, "Why late") from state the service keeps anyway: the
job document and its attempt history, its biz type's config, the brokers'
heartbeats, and its partition's daemon lease and time pointer. Nothing here is
written on the hot path to make it possible; what is not stored is left out (a
final job's publish and hold times of a first attempt that a retry claimed again).

The job's *moment* is when its next callback may go out: `next_attempt_at` (the due
time of a first attempt, a retry's or a replay's time), never before its creation
(a job created past due fires at once). An open job is late once its moment has
passed; a pending retry whose moment is ahead is past its due time but waits as it
should, for its backoff. A final job is late when its outcome came more than
`ON_TIME_MS` after its first moment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from timer_service.dispatch import BrokerBeat, LeaseState, sender_of
from timer_service.model import BizType, Job, JobState, second_of

# The contract's "on time": the first callback within 1 s of the due time.
ON_TIME_MS = 1000
# Past a heartbeat's expiry, a broker is judged dead by the reconciler (daemon/holders.py).
BROKER_DEAD_AFTER_MS = 2000


class WaitingFor(StrEnum):
    RETRY = "retry"  # a retry's backoff: not late, waiting for next_attempt_at
    PAUSED = "paused"  # its biz type is paused
    NO_DAEMON = "no_daemon"  # no live daemon holds its partition's lease
    DAEMON_BEHIND = "daemon_behind"  # its partition's scan has not reached its second
    CLAIM = "claim"  # the daemon has it next: being claimed and published
    NO_BROKER = "no_broker"  # no live broker consumes its biz type
    RATE_LIMIT = "rate_limit"  # behind the biz type's rate limit
    CONCURRENCY = "concurrency"  # behind the biz type's in-flight cap
    BROKER = "broker"  # held by a live broker, no limit binding: going out
    ENDPOINT = "endpoint"  # its callback has started: waiting for the endpoint
    RECONCILE = "reconcile"  # dispatched, held by no live broker: republished later


@dataclass(frozen=True, slots=True)
class Waiting:
    """What an open job waits for. `until`: when that should end (epoch ms), an
    estimate when `detail` says so; None when nothing bounds it (a pause)."""

    late_ms: int
    waiting_for: WaitingFor
    detail: str
    until: int | None = None


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where a final job's lateness arose, in ms from its first moment (None: not
    stored, `detail` says why): `publish_ms` claim - moment, `hold_ms` first send -
    claim (in the queue and the broker), `send_ms` first send - moment, `retries_ms`
    last send - first send, `endpoint_ms` the last attempt's round trip."""

    late_ms: int
    detail: str
    send_ms: int | None
    publish_ms: int | None
    hold_ms: int | None
    retries_ms: int | None
    endpoint_ms: int | None


Lateness = Waiting | Breakdown


@dataclass(frozen=True, slots=True)
class Surroundings:
    """The state a late open job is judged by, read for it alone."""

    biz: BizType | None
    beats: Sequence[BrokerBeat]
    partition: int
    lease: LeaseState | None  # its partition's daemon lease (None: never taken)
    pointer_s: int | None  # its partition's time pointer (None: never saved)
    reconcile_after_ms: int


def moment_of(job: Job) -> int:
    """When the job's next callback may go out (its first moment for a final job)."""
    at = job.fires_at if job.next_attempt_at is None else job.next_attempt_at
    return max(at, job.created_at)


def needs_surroundings(job: Job, now_ms: int) -> bool:
    """Whether judging the job takes more than the job itself: an open job whose
    moment has passed. Everything else costs no store read."""
    return job.state in (JobState.PENDING, JobState.DISPATCHED) and moment_of(job) <= now_ms


def without_surroundings(job: Job, now_ms: int) -> Lateness | None:
    """The judgement of a job that `needs_surroundings` says is judged alone."""
    if job.state in (JobState.DELIVERED, JobState.DEAD):
        return breakdown(job)
    if job.state == JobState.PENDING and job.attempts > 0 and moment_of(job) > now_ms:
        first = max(job.fires_at, job.created_at)
        at = moment_of(job)
        detail = f"waiting for retry at {at} (attempt {job.attempts + 1}, in {at - now_ms} ms)"
        return Waiting(max(0, now_ms - first), WaitingFor.RETRY, detail, at)
    return None


def judge(job: Job, around: Surroundings, now_ms: int) -> Waiting:
    """What a late open job (`needs_surroundings`) waits for, the first cause that holds."""
    late_ms = now_ms - moment_of(job)
    if around.biz is not None and around.biz.paused:
        return Waiting(late_ms, WaitingFor.PAUSED, f"biz type {job.biz_type} is paused")
    if job.state == JobState.PENDING:
        return _pending(job, around, now_ms, late_ms)
    return _dispatched(job, around, now_ms, late_ms)


def _pending(job: Job, around: Surroundings, now_ms: int, late_ms: int) -> Waiting:
    p, lease = around.partition, around.lease
    if lease is None or lease.expires_at < now_ms:
        since = "was never taken" if lease is None else f"lapsed at {lease.expires_at}"
        detail = (
            f"no daemon owns partition {p}: its lease {since}; a daemon takes over"
            " within 2 x TIMER_LEASE_TTL_MS of starting or of the last one's end"
        )
        return Waiting(late_ms, WaitingFor.NO_DAEMON, detail)
    second = second_of(moment_of(job))
    pointer = around.pointer_s
    if late_ms > ON_TIME_MS and (pointer is None or pointer < second):
        at = "has no saved pointer" if pointer is None else f"is at second {pointer}"
        behind = "" if pointer is None else f", {second - pointer} s before the job's"
        detail = (
            f"the scan of partition {p} (daemon {lease.holder}) {at}{behind}:"
            " it catches up oldest second first"
        )
        return Waiting(late_ms, WaitingFor.DAEMON_BEHIND, detail)
    detail = f"daemon {lease.holder} owns partition {p} and has it next: claim and publish"
    if late_ms > ON_TIME_MS:
        detail += " (its scan passed the job's second: the daemon's sweep finds it)"
    return Waiting(late_ms, WaitingFor.CLAIM, detail)


def _live(beat: BrokerBeat, now_ms: int) -> bool:
    return beat.left_ms(now_ms) >= 0


def _dispatched(job: Job, around: Surroundings, now_ms: int, late_ms: int) -> Waiting:
    biz_type = job.biz_type
    if job.sending is not None:
        sender = sender_of(job.sending) or "unknown"
        beat = next((b for b in around.beats if b.broker_id == sender), None)
        if beat is not None and beat.left_ms(now_ms) + BROKER_DEAD_AFTER_MS >= 0:
            timeout = around.biz.timeout_ms if around.biz is not None else 0
            until = job.updated_at + timeout
            detail = (
                f"broker {sender} started its callback at {job.updated_at}: the endpoint"
                f" answers, or times out after {timeout} ms, by {until}"
            )
            return Waiting(late_ms, WaitingFor.ENDPOINT, detail, until)
        detail = (
            f"broker {sender} started its callback and is gone: the reconciler sends it"
            " again at its next look"
        )
        return Waiting(late_ms, WaitingFor.RECONCILE, detail)
    consumers = [b for b in around.beats if _live(b, now_ms) and biz_type in b.consuming]
    if not consumers:
        detail = f"no live broker consumes biz type {biz_type}: its messages wait in the queue"
        return Waiting(late_ms, WaitingFor.NO_BROKER, detail)
    held = [
        h
        for b in around.beats
        if b.left_ms(now_ms) + BROKER_DEAD_AFTER_MS >= 0
        for h in b.held
        if h.biz_type == biz_type and h.messages > 0
    ]
    oldest = min((h.oldest_claimed_at for h in held), default=None)
    claimed_at = job.claimed_at or 0
    if oldest is None or claimed_at < oldest:
        until = claimed_at + around.reconcile_after_ms
        when = f"at {until}" if until > now_ms else "at its next look"
        detail = (
            f"no live broker holds it (claimed at {claimed_at}): the message is lost or"
            f" still in the queue; the reconciler publishes it again {when}"
            " (TIMER_RECONCILE_AFTER_MS after the claim)"
        )
        return Waiting(late_ms, WaitingFor.RECONCILE, detail, until)
    messages = sum(h.messages for h in held)
    return _held(job, around.biz, messages, oldest, now_ms, late_ms)


def _held(
    job: Job, biz: BizType | None, messages: int, oldest: int, now_ms: int, late_ms: int
) -> Waiting:
    """Held by a live broker among `messages` of its biz type, claimed at `oldest` or
    later: the job is at most that far back (the queue keeps claim order)."""
    holding = f"{messages} messages of {job.biz_type} held, the oldest claimed at {oldest}"
    rate = None if biz is None else biz.rate_limit_per_s
    if biz is not None and rate is not None and messages > biz.burst:
        wait_ms = math.ceil(messages * 1000 / rate)
        detail = (
            f"behind the rate limit: {holding}; at {rate:g}/s the job goes out within"
            f" ~{wait_ms} ms (estimate: the held messages, at the rate)"
        )
        return Waiting(late_ms, WaitingFor.RATE_LIMIT, detail, now_ms + wait_ms)
    if biz is not None and messages >= biz.max_concurrency:
        rounds = math.ceil(messages / biz.max_concurrency)
        wait_ms = rounds * biz.timeout_ms
        detail = (
            f"behind the in-flight cap of {biz.max_concurrency}: {holding}; within"
            f" ~{wait_ms} ms (estimate: {rounds} rounds of callbacks, each at most"
            f" timeout_ms {biz.timeout_ms})"
        )
        return Waiting(late_ms, WaitingFor.CONCURRENCY, detail, now_ms + wait_ms)
    detail = f"held by a live broker, no limit binding: {holding}; going out now"
    return Waiting(late_ms, WaitingFor.BROKER, detail)


def breakdown(job: Job) -> Breakdown | None:
    """Where a final job's lateness arose; None when its outcome came on time."""
    first_moment = max(job.fires_at, job.created_at)
    finished = job.delivered_at if job.delivered_at is not None else job.updated_at
    late_ms = finished - first_moment
    if late_ms <= ON_TIME_MS:
        return None
    if not job.history:
        detail = f"{job.state.value} without an attempt recorded"
        return Breakdown(late_ms, detail, None, None, None, None, None)
    first, last = job.history[0], job.history[-1]
    send_ms = first.at - first_moment
    publish_ms = hold_ms = None
    unstored = ""
    if job.attempts == 1 and job.budget_base == 0 and job.claimed_at is not None:
        publish_ms = max(0, job.claimed_at - first_moment)
        hold_ms = first.at - max(job.claimed_at, first_moment)
    else:
        unstored = "; publish and hold of the first attempt: not stored once a retry claims"
    parts = {
        "publish": publish_ms,
        "hold": hold_ms,
        "retries": last.at - first.at,
        "endpoint": last.duration_ms,
    }
    if publish_ms is None:
        parts["send"] = send_ms
    worst = max(parts, key=lambda name: parts[name] or 0)
    detail = f"{job.state.value} {late_ms} ms after its moment, mostly in {worst}{unstored}"
    return Breakdown(
        late_ms, detail, send_ms, publish_ms, hold_ms, last.at - first.at, last.duration_ms
    )


def lease_of(leases: Sequence[LeaseState], name: str) -> LeaseState | None:
    """The lease of that exact name (a prefix listing of `daemon-p1` holds `daemon-p10`)."""
    return next((lease for lease in leases if lease.name == name), None)


def to_public(lateness: Lateness | None) -> dict[str, object] | None:
    """The job resource's `lateness` member: one shape for both kinds, members that do
    not apply null (docs/api.md, "Why late")."""
    if lateness is None:
        return None
    if isinstance(lateness, Waiting):
        return {
            "kind": "waiting",
            "late_ms": lateness.late_ms,
            "waiting_for": lateness.waiting_for.value,
            "detail": lateness.detail,
            "until": lateness.until,
            **dict.fromkeys(BREAKDOWN_MEMBERS),
        }
    return {
        "kind": "final",
        "late_ms": lateness.late_ms,
        "waiting_for": None,
        "detail": lateness.detail,
        "until": None,
        **{name: getattr(lateness, name) for name in BREAKDOWN_MEMBERS},
    }


BREAKDOWN_MEMBERS = ("send_ms", "publish_ms", "hold_ms", "retries_ms", "endpoint_ms")
