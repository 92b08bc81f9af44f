"""The broker's outcomes: the mark before sending, and what each attempt came to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import Outcome, SendRef
from timer_service.model import Job


class OutcomesPort(Protocol):
    async def start_sending(
        self, refs: Sequence[SendRef], send_token: str, now_ms: int
    ) -> dict[str, Job]:
        """Batched `jobs.start_sending`: of these, the jobs now marked as being sent
        under `send_token`, by job key. The others (cancelled, stale duplicates, a
        claim whose callback another message has started) are absent: not to be sent.
        Idempotent: the same call again (same `send_token`, after a lost reply)
        answers the jobs the first one marked.

        Fenced: a ref whose `epoch` is set and is not its biz type's current
        ownership epoch (`brokers.own_biz_type`) fails the call with `StaleEpoch`,
        naming those biz types, and nothing of it is marked: a broker that lost the
        stream (frozen, cut off) can mark nothing of it."""
        ...

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """Batched: `jobs.outcome` for each (the attempt's record, and the job to
        delivered, dead, or pending at next_attempt_at: a retry is a new timer);
        `jobs.outcome_after_cancel` for a job cancelled meanwhile."""
        ...
