"""The operator console's jobs: search by filter, count, bulk changes, and what the
stats are made of.

As for the API's single changes, the state machine (`timer_service.jobs`) decides
every change; `apply_changes` only applies them, each under its guard, batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from timer_service.jobs import Change
from timer_service.model import Attempt, Job, JobState
from timer_service.search import JobFilter


@dataclass(frozen=True, slots=True)
class RecentAttempt:
    """One callback attempt of a job, with what lateness needs: its due time and when it
    was registered (a job registered past due is late by no fault of the service)."""

    biz_type: str
    due_at: int
    attempt: Attempt
    created_at: int


class ConsolePort(Protocol):
    async def search_jobs(
        self, where: JobFilter, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """Jobs matching `where` in identity order after `cursor`: at most `limit`, and
        at most `search.SEARCH_SCAN_LIMIT` read, so a page may end short; the cursor
        to go on from, or None when there is nothing after. The jobs come without
        their attempts' answers (`Attempt.response` None): a listing stays small."""
        ...

    async def count_matching(self, where: JobFilter) -> int:
        """How many jobs match `where` (a dry run's count)."""
        ...

    async def apply_changes(self, changes: Sequence[tuple[Job, Change]], now_ms: int) -> list[Job]:
        """Apply each change to its job if its guard still holds, batched (not a round
        trip per job); the jobs changed, as they are now. A job whose guard no longer
        holds (its callback started, it was changed meanwhile) is left as it is."""
        ...

    async def count_by_state(self, biz_type: str | None) -> dict[tuple[str, JobState], int]:
        """Jobs per (biz type, state), of one biz type or all; pairs with none are left out."""
        ...

    async def recent_attempts(self, since_ms: int, biz_type: str | None) -> list[RecentAttempt]:
        """Every attempt made at or after `since_ms`, of one biz type or all."""
        ...
