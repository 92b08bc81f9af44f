"""The domain: jobs, their states and attempts, biz types and retry policy. No I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from timer_service.callback_targets import redact_url
from timer_service.constants import DEFAULT_RETRY, RESERVED_BIZ_TYPE_PREFIX
from timer_service.responses import AttemptResponse
from timer_service.tracecontext import TraceContext


class JobState(StrEnum):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    DELIVERED = "delivered"
    DEAD = "dead"
    CANCELLED = "cancelled"


FINAL_STATES = frozenset({JobState.DELIVERED, JobState.DEAD, JobState.CANCELLED})
ACTIVE_STATES = frozenset({JobState.PENDING, JobState.DISPATCHED})


def job_key(biz_type: str, job_id: str) -> str:
    """The identity as one string; unambiguous because biz types never hold '/'."""
    return f"{biz_type}/{job_id}"


def split_key(key: str) -> tuple[str, str]:
    biz_type, _, job_id = key.partition("/")
    return biz_type, job_id


def encode_payload(payload: Any) -> str:
    """Payloads are kept as their compact JSON text: exact, opaque to the store."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def same_payload(a_json: str, b_json: str) -> bool:
    if a_json == b_json:
        return True
    return canonical_json(a_json) == canonical_json(b_json)


def canonical_json(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


Labels = tuple[tuple[str, str], ...]  # a job's labels as sorted (key, value) pairs


def labels_of(mapping: dict[str, str] | None) -> Labels:
    """Labels in their one spelling: sorted pairs, so equal objects compare equal."""
    return tuple(sorted((mapping or {}).items()))


def is_reserved(biz_type: str) -> bool:
    """A biz type of the service's own (the canary's): never a business's to see."""
    return biz_type.startswith(RESERVED_BIZ_TYPE_PREFIX)


def business_biz_types(bizes: list[BizType]) -> list[BizType]:
    """Every biz type but the service's own: what a business may see."""
    return [biz for biz in bizes if not is_reserved(biz.biz_type)]


def second_of(ms: int) -> int:
    return ms // 1000


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    at: int
    status_code: int | None
    error: str | None
    duration_ms: int
    # What the endpoint answered, as kept (timer_service.responses); None when no
    # answer came, or when it is older than the job's last RESPONSES_KEPT answers.
    response: AttemptResponse | None = None

    def to_dict(self) -> dict[str, Any]:
        """The attempt without its answer (stored apart from it by the MongoDB store)."""
        return {
            "attempt": self.attempt,
            "at": self.at,
            "status_code": self.status_code,
            "error": self.error,
            "duration_ms": self.duration_ms,
        }

    def to_public(self) -> dict[str, Any]:
        answer = None if self.response is None else self.response.to_dict()
        return {**self.to_dict(), "response": answer}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Attempt:
        return cls(d["attempt"], d["at"], d.get("status_code"), d.get("error"), d["duration_ms"])


@dataclass(frozen=True, slots=True)
class Job:
    biz_type: str
    job_id: str
    due_at: int
    payload_json: str
    state: JobState
    attempts: int
    next_attempt_at: int | None
    created_at: int
    updated_at: int
    delivered_at: int | None = None
    last_error: str | None = None
    history: tuple[Attempt, ...] = ()
    labels: Labels = ()
    # A flexible job may fire anywhere in [due_at, due_at + window_ms]; fire_at is the
    # moment chosen at its creation (docs/api.md, "Load calendar and flexible windows").
    window_ms: int = 0
    fire_at: int | None = None  # None: due_at (a job without a window, or from before)
    # Internal bookkeeping, never shown by the API.
    claim: str | None = None  # token of the dispatch that owns the job now
    fence: int = 0  # lease token of the daemon that claimed it last
    claimed_at: int | None = None
    budget_base: int = 0  # attempts made before the last replay
    # Set when a broker starts the callback (its send token): from then on a cancel
    # answers "in flight", and another message of the same claim is not sent.
    sending: str | None = None
    # The W3C trace context the job was registered under: its callbacks continue it.
    trace: TraceContext | None = None

    @property
    def key(self) -> str:
        return job_key(self.biz_type, self.job_id)

    @property
    def payload(self) -> Any:
        return json.loads(self.payload_json)

    @property
    def fires_at(self) -> int:
        """The moment its first attempt was set for: never before it."""
        return self.due_at if self.fire_at is None else self.fire_at

    def to_public(self, answers: bool = True) -> dict[str, Any]:
        """The job as the API shows it; `answers=False` leaves the attempts' `response`
        out, for listings (docs/api.md, "Attempt responses")."""
        return {
            "biz_type": self.biz_type,
            "job_id": self.job_id,
            "due_at": self.due_at,
            "payload": self.payload,
            "state": self.state.value,
            "attempts": self.attempts,
            "next_attempt_at": self.next_attempt_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "delivered_at": self.delivered_at,
            "last_error": self.last_error,
            "history": [a.to_public() if answers else a.to_dict() for a in self.history],
            "labels": dict(self.labels),
            "window_ms": self.window_ms,
            "fire_at": self.fires_at,
        }

    def evolve(self, **changes: Any) -> Job:
        return replace(self, **changes)


BACKOFF_JITTER = 0.1  # a retry waits up to 10% longer than the backoff formula...
MAX_JITTER_MS = 500  # ...and at most this much longer


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = DEFAULT_RETRY["max_attempts"]  # type: ignore[assignment]
    initial_backoff_ms: int = DEFAULT_RETRY["initial_backoff_ms"]  # type: ignore[assignment]
    max_backoff_ms: int = DEFAULT_RETRY["max_backoff_ms"]  # type: ignore[assignment]
    multiplier: float = DEFAULT_RETRY["multiplier"]

    def backoff_ms(self, attempt: int, spread: float = 0.0) -> int:
        """Wait after failed attempt `attempt` (1-based): docs/api.md, "Callback protocol".

        The contract's wait, `min(max, initial * multiplier^(attempt-1))`, plus a
        jitter of up to a tenth of it (at most MAX_JITTER_MS) by `spread` in [0, 1),
        still capped: jobs that failed together do not come back together. The jitter
        only ever adds, never earlier than the contract's wait: not AWS's "full
        jitter", which may retry at once."""
        try:
            raw = self.initial_backoff_ms * self.multiplier ** (attempt - 1)
        except OverflowError:
            return self.max_backoff_ms
        jitter = min(raw * BACKOFF_JITTER, MAX_JITTER_MS) * spread
        return int(min(self.max_backoff_ms, raw + jitter))

    def capped(self, wait_ms: int) -> int:
        return max(0, min(self.max_backoff_ms, wait_ms))

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_backoff_ms": self.initial_backoff_ms,
            "max_backoff_ms": self.max_backoff_ms,
            "multiplier": self.multiplier,
        }


@dataclass(frozen=True, slots=True)
class BizType:
    biz_type: str
    callback_url: str
    rate_limit_per_s: float | None = None
    burst: int = 1
    max_concurrency: int = 16
    timeout_ms: int = 10000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    signing_secret: str | None = field(default=None, repr=False)
    paused: bool = False
    created_at: int = 0
    updated_at: int = 0
    # During a rotation the secret replaced last still signs until this time (epoch ms).
    previous_signing_secret: str | None = field(default=None, repr=False)
    previous_secret_expires_at: int | None = None
    # The API's registration quota (timer_service.quota): jobs created per second on one
    # API process, and how many at once; None = unlimited.
    registration_rate_per_s: float | None = None
    registration_burst: int | None = None

    def signing_secrets(self, now_ms: int) -> tuple[str, ...]:
        """The secrets a callback sent at `now_ms` is signed with: the current one first."""
        if self.signing_secret is None:
            return ()
        if self.previous_signing_secret is not None and self.rotating_at(now_ms):
            return (self.signing_secret, self.previous_signing_secret)
        return (self.signing_secret,)

    def rotating_at(self, now_ms: int) -> bool:
        """Whether the previous secret still signs at `now_ms`."""
        expires_at = self.previous_secret_expires_at
        if self.previous_signing_secret is None or expires_at is None:
            return False
        return now_ms < expires_at

    def rotate_secret(self, new_secret: str, keep_previous_ms: int, now_ms: int) -> BizType:
        """`new_secret` signs from now on; the current one too for `keep_previous_ms` more.

        Two secrets at most: a secret still kept from an earlier rotation is dropped."""
        keep = self.signing_secret is not None and keep_previous_ms > 0
        return replace(
            self,
            signing_secret=new_secret,
            previous_signing_secret=self.signing_secret if keep else None,
            previous_secret_expires_at=now_ms + keep_previous_ms if keep else None,
            updated_at=now_ms,
        )

    def replaced_by(self, new: BizType, now_ms: int) -> BizType:
        """`new` as the config that replaces this one (a PUT): a rotation in progress goes on
        while the current secret stays the same, and ends when it changes."""
        if new.signing_secret is not None and new.signing_secret == self.signing_secret:
            if self.rotating_at(now_ms):
                return replace(
                    new,
                    previous_signing_secret=self.previous_signing_secret,
                    previous_secret_expires_at=self.previous_secret_expires_at,
                )
        return new

    def to_public(self, now_ms: int | None = None) -> dict[str, Any]:
        """What the API shows: never a secret (nor the credentials of a `callback_url`
        stored before they were refused). `signing_secret_rotating_until` is when the
        previous secret stops signing, while it still does (at `now_ms`, when given)."""
        rotating = self.previous_signing_secret is not None and (
            now_ms is None or self.rotating_at(now_ms)
        )
        return {
            "biz_type": self.biz_type,
            "callback_url": redact_url(self.callback_url),
            "rate_limit_per_s": self.rate_limit_per_s,
            "burst": self.burst,
            "max_concurrency": self.max_concurrency,
            "timeout_ms": self.timeout_ms,
            "retry": self.retry.to_dict(),
            "has_signing_secret": self.signing_secret is not None,
            "signing_secret_rotating_until": self.previous_secret_expires_at if rotating else None,
            "paused": self.paused,
            "registration_rate_per_s": self.registration_rate_per_s,
            "registration_burst": self.registration_burst,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def to_doc(self) -> dict[str, Any]:
        doc = self.to_public()
        del doc["has_signing_secret"], doc["signing_secret_rotating_until"]
        doc["callback_url"] = self.callback_url
        doc["signing_secret"] = self.signing_secret
        doc["previous_signing_secret"] = self.previous_signing_secret
        doc["previous_secret_expires_at"] = self.previous_secret_expires_at
        return doc

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> BizType:
        return cls(
            biz_type=d["biz_type"],
            callback_url=d["callback_url"],
            rate_limit_per_s=d.get("rate_limit_per_s"),
            burst=d.get("burst", 1),
            max_concurrency=d.get("max_concurrency", 16),
            timeout_ms=d.get("timeout_ms", 10000),
            retry=RetryPolicy(**d.get("retry", {})),
            signing_secret=d.get("signing_secret"),
            paused=d.get("paused", False),
            created_at=d.get("created_at", 0),
            updated_at=d.get("updated_at", 0),
            previous_signing_secret=d.get("previous_signing_secret"),
            previous_secret_expires_at=d.get("previous_secret_expires_at"),
            registration_rate_per_s=d.get("registration_rate_per_s"),
            registration_burst=d.get("registration_burst"),
        )
