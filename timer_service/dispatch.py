"""The dispatch vocabulary: what the daemon claims and publishes, what the broker
sends and reports back. Plain values, shared by the daemon, the queue, the broker
and the store ports; no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum

from timer_service.model import Attempt, Job


@dataclass(frozen=True, slots=True)
class SecondEntry:
    """One entry of the non-empty-seconds index, at the version it was read. A
    version is unique to one write of the entry (never reused, also not after the
    entry was deleted and created again), so a release with an old version can
    only miss."""

    second: int
    version: str
    # One (partition, version) per partition with an entry in this second, when the
    # caller owns several (timer_service/partitions.py); empty: partition 0 only.
    parts: tuple[tuple[int, str], ...] = ()

    @classmethod
    def merged(cls, second: int, parts: list[tuple[int, str]]) -> SecondEntry:
        """The entries of one second across partitions, as one: its version changes
        whenever any of them does."""
        parts = sorted(parts)
        if parts == [(0, parts[0][1])]:
            return cls(second, parts[0][1])
        return cls(second, ";".join(f"{p}:{v}" for p, v in parts), tuple(parts))

    def partition_versions(self) -> tuple[tuple[int, str], ...]:
        return self.parts or ((0, self.version),)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A job the daemon claimed; what it publishes to the queue."""

    biz_type: str
    job_id: str
    second: int  # the second the job fires in
    due_at: int
    next_attempt_at: int  # not to be sent before this
    attempt: int  # the number the coming callback will carry
    claim: str
    fence: int = 0  # the fencing token of the daemon that claimed it
    # When it was claimed (the store's `claimed_at`): brokers report the oldest they
    # hold, and the reconciler knows that what is older is held by nobody.
    claimed_at: int = 0
    # The job's W3C traceparent, for the daemon's dispatch span; not in the message.
    traceparent: str | None = None
    # The job as claimed, its history left out: the broker's send mark applies its
    # change to it instead of reading the job back (None: a message that does not
    # carry it, which the mark reads).
    job: Job | None = None
    # The store's home of the job (its bucket), which never changes; None: the bucket
    # of `second` (a message published before jobs had a home of their own).
    bucket: int | None = None


@dataclass(frozen=True, slots=True)
class SendRef:
    """What the broker knows of a job from its message."""

    biz_type: str
    job_id: str
    second: int
    claim: str
    retake: bool = False  # a redelivered message: may take over a send it had started
    # The job's due time, as its message carries it (None: unknown). An outcome well
    # within its locator's expiry then writes no locator (`Layout.outlives_locator`).
    due_at: int | None = None
    job: Job | None = None  # the job as claimed, if its message carries it (`Claimed.job`)
    bucket: int | None = None  # where the job lives (`Claimed.bucket`)
    # The marking broker's ownership epoch of the biz type (`brokers.own_biz_type`): a
    # mark under an epoch that is no longer the biz type's applies nowhere (None: none).
    epoch: int | None = None


class OutcomeKind(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one callback attempt came to, reported by the broker."""

    ref: SendRef
    kind: OutcomeKind
    attempt: Attempt
    next_attempt_at: int | None = None  # for RETRY


@dataclass(frozen=True, slots=True)
class HeldBiz:
    """What a broker holds of one biz type: how many messages, and the oldest
    `claimed_at` among them (what is older, it no longer holds)."""

    biz_type: str
    messages: int
    oldest_claimed_at: int


@dataclass(frozen=True, slots=True)
class BrokerBeat:
    """A broker's last heartbeat: alive until `expires_at` (epoch ms, by the store's
    clock: the moment the store applied the beat, plus its time to live).

    `read_at` is the store's clock when the beat was read: what `expires_at` is
    judged against, so that neither a beat that waited in a busy store nor a read
    that did makes a live broker look older than it is (None: the store keeps no
    clock of its own; the reader's applies)."""

    broker_id: str
    expires_at: int
    held: tuple[HeldBiz, ...] = ()
    consuming: tuple[str, ...] = ()  # the biz types it subscribes to (broker/ownership.py)
    read_at: int | None = None

    def left_ms(self, now_ms: int) -> int:
        """How long it has left to live when read (the reader's `now_ms` if the store
        keeps no clock); negative once lapsed."""
        return self.expires_at - (now_ms if self.read_at is None else self.read_at)


@dataclass(frozen=True, slots=True)
class BucketTaken:
    """A biz type's token bucket as a broker found it when it took it to send
    (`BrokersPort.take_bucket`; broker/lane.py). `at_ms`: the store's clock at the take.
    `was_taken`: a broker took it before (else nothing was ever sent for the biz type:
    the bucket starts full). `left_at`: when the last taker let go of it, with
    `left_tokens` then (None: unlimited then); None when it never let go: it may still
    be sending, or died sending."""

    at_ms: int
    was_taken: bool
    left_at: int | None = None
    left_tokens: float | None = None


@dataclass(frozen=True, slots=True)
class LeaseState:
    """One lease as stored: who holds it under which fence, until when (epoch ms)."""

    name: str
    holder: str
    token: int
    expires_at: int


def new_send_token(broker_id: str) -> str:
    """A send mark that names the broker making it, so that the reconciler can tell
    the sends of a broker known dead."""
    return f"{broker_id}/{uuid.uuid4().hex}"


def sender_of(send_token: str) -> str | None:
    """The broker that made a send mark; None for a mark that does not say."""
    broker_id, sep, _ = send_token.rpartition("/")
    return broker_id if sep else None
