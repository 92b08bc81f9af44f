"""In-memory overdue sweep."""

from __future__ import annotations

from collections.abc import Collection

from timer_service.model import JobState
from timer_service.store.memory.scope import Scoped


class MemorySweep(Scoped):
    def _overdue(self, before_ms: int) -> list[tuple[int, str]]:
        out = []
        for pending in self._s.pending_in_second.values():
            for due, key in pending:
                if due >= before_ms:
                    break
                if self._mine(key):
                    out.append((due, key))
        return sorted(out)

    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        overdue = self._overdue(before_ms)
        return sorted({self._s.second_of_job[key] for _, key in overdue[:limit]})

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        """As on MongoDB: each pending job's second gets an entry naming its bucket,
        where none does."""
        for second in sorted(set(seconds)):
            for key in self._s.jobs_in_second.get(second, ()):
                job = self._s.jobs[key]
                at = self._s.slot(key, second)
                home = self._s.home[key]
                named = self._s.named.get(at, ()) if at in self._s.versions else ()
                if job.state == JobState.PENDING and self._mine(key) and home not in named:
                    self._s.bump(at, home)

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        return 0  # nothing here expires
