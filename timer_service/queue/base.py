"""The dispatch-queue port: the daemon publishes claimed jobs, the broker consumes them.

Topology (RabbitMQ adapter): one durable direct exchange ``{prefix}.dispatch``
and per biz type one durable quorum queue ``{prefix}.biz.{biz_type}`` with
single-active-consumer, bound by the biz type as routing key. One consumer at a
time across all brokers owns a biz type's stream, so its rate limit and
in-flight cap are enforced in one place.

tests/contract/test_queue_contract.py holds both adapters to what is written here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from timer_service.dispatch import Claimed
from timer_service.model import Job, JobState
from timer_service.tracecontext import TraceContext


def encode(job: Claimed) -> bytes:
    message: dict[str, Any] = {
        "biz_type": job.biz_type,
        "job_id": job.job_id,
        "second": job.second,
        "due_at": job.due_at,
        "next_attempt_at": job.next_attempt_at,
        "attempt": job.attempt,
        "claim": job.claim,
        "fence": job.fence,
        "claimed_at": job.claimed_at,
    }
    if job.job is not None:
        message["job"] = _job_fields(job.job)
    if job.bucket is not None:
        message["bucket"] = job.bucket
    return json.dumps(message, separators=(",", ":")).encode()


def decode(body: bytes) -> Claimed:
    d = json.loads(body)
    return Claimed(
        biz_type=d["biz_type"],
        job_id=d["job_id"],
        second=d["second"],
        due_at=d["due_at"],
        next_attempt_at=d["next_attempt_at"],
        attempt=d["attempt"],
        claim=d["claim"],
        fence=d.get("fence", 0),
        claimed_at=d.get("claimed_at", 0),
        job=None if (job := d.get("job")) is None else _job_of(d, job),
        bucket=d.get("bucket"),
    )


def _job_fields(job: Job) -> dict[str, Any]:
    """What a message adds of its job to the fields it has anyway (the payload as its
    JSON text, as stored)."""
    trace = job.trace
    return {
        "payload": job.payload_json,
        "state": job.state.value,
        "attempts": job.attempts,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "delivered_at": job.delivered_at,
        "last_error": job.last_error,
        "labels": [list(pair) for pair in job.labels],
        "budget_base": job.budget_base,
        "sending": job.sending,
        "trace": None if trace is None else [trace.traceparent, trace.tracestate],
        **({"window": [job.window_ms, job.fire_at]} if job.window_ms else {}),
    }


def _job_of(m: dict[str, Any], d: dict[str, Any]) -> Job:
    """The job a message carries: `d`, with the message's own fields `m`."""
    trace = d["trace"]
    window_ms, fire_at = d.get("window", (0, None))
    return Job(
        biz_type=m["biz_type"],
        job_id=m["job_id"],
        due_at=m["due_at"],
        payload_json=d["payload"],
        state=JobState(d["state"]),
        attempts=d["attempts"],
        next_attempt_at=m["next_attempt_at"],
        created_at=d["created_at"],
        updated_at=d["updated_at"],
        delivered_at=d["delivered_at"],
        last_error=d["last_error"],
        labels=tuple((k, v) for k, v in d["labels"]),
        claim=m["claim"],
        fence=m.get("fence", 0),
        claimed_at=m.get("claimed_at", 0),
        budget_base=d["budget_base"],
        sending=d["sending"],
        trace=None if trace is None else TraceContext(trace[0], trace[1]),
        window_ms=window_ms,
        fire_at=fire_at,
    )


class Delivery(Protocol):
    """One message, handed to a handler unsettled. Its fate is decided once: a later
    ack, requeue or drop, or one after its consumer was cancelled, is a no-op."""

    job: Claimed
    redelivered: bool

    @property
    def live(self) -> bool:
        """Unsettled, and its channel still open: once the channel is gone the queue
        has taken the message back (and may hand it to another consumer), so it must
        no longer be acted on here."""
        ...

    async def ack(self) -> None: ...

    async def requeue(self) -> None:
        """Hand the message back to the queue (another consumer may take it)."""

    async def drop(self) -> None:
        """Reject without requeue: the message is unreadable."""


class Consumer(Protocol):
    async def cancel(self) -> None:
        """Stop receiving; unacked messages go back to the queue on close."""


Handler = Callable[[Delivery], Awaitable[None]]


class DispatchQueue(Protocol):
    # Whether messages outlive the process that consumes them (RabbitMQ: yes; the
    # in-process queue: no, so a new leader republishes what the old one held).
    durable: bool

    async def connect(self) -> None: ...

    async def close(self) -> None:
        """Idempotent. Consumers stop, their unsettled messages go back; until the next
        connect(), ping, publish and consume raise ConnectionError."""

    async def ping(self) -> None:
        """Raise if the queue backend does not answer."""

    async def ensure_biz(self, biz_type: str) -> None:
        """Declare the biz type's queue and binding; idempotent and cached."""

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        """Publish all, confirmed by the backend; raise if any was not confirmed."""

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> Consumer:
        """Deliver the biz type's messages to `handler` (manual ack), at most `prefetch`
        unsettled, each in its own task. Only the first consumer of a biz type receives;
        the next takes over when it is cancelled."""

    async def queue_depth(self, biz_type: str) -> int | None:
        """Messages ready in the biz type's queue, or None when unknown (no such queue)."""
