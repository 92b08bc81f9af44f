"""The broker's outcomes: the check before sending, and what each attempt came to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import Outcome, SendRef
from timer_service.model import Job


class OutcomesPort(Protocol):
    async def fetch_for_send(self, refs: Sequence[SendRef]) -> dict[str, Job]:
        """Batched: of these, the jobs still dispatched under the claim the ref
        carries, by job key. Others (cancelled, stale duplicates) are absent."""
        ...

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """Batched: `jobs.outcome` for each (the attempt's record, and the job to
        delivered, dead, or pending at next_attempt_at: a retry is a new timer);
        `jobs.outcome_after_cancel` for a job cancelled meanwhile."""
        ...
