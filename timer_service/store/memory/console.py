"""In-memory console calls: the filter over the dict of jobs, in key order, with the
same scan bound as the MongoDB adapter."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

from timer_service.jobs import Change, without_answers
from timer_service.model import Job, JobState
from timer_service.search import SEARCH_SCAN_LIMIT, JobFilter
from timer_service.store.memory.state import MemoryState
from timer_service.store.ports.console import RecentAttempt


class MemoryConsole:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    def _keys_from(self, where: JobFilter, cursor: str | None) -> tuple[list[str], int]:
        keys = sorted(self._s.jobs)
        start = bisect.bisect_right(keys, cursor) if cursor else 0
        prefix = where.key_prefix
        if prefix is not None:
            start = max(start, bisect.bisect_left(keys, prefix))
        return keys, start

    async def search_jobs(
        self, where: JobFilter, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        keys, start = self._keys_from(where, cursor)
        prefix = where.key_prefix
        items: list[Job] = []
        for scanned, key in enumerate(keys[start:], 1):
            if prefix is not None and not key.startswith(prefix):
                return items, None
            job = self._s.jobs[key]
            if where.matches(job):
                items.append(without_answers(job))
                if len(items) == limit:
                    return items, self._cursor_after(keys, key, prefix)
            if scanned == SEARCH_SCAN_LIMIT:
                return items, self._cursor_after(keys, key, prefix)
        return items, None

    @staticmethod
    def _cursor_after(keys: list[str], key: str, prefix: str | None) -> str | None:
        following = bisect.bisect_right(keys, key)
        more = following < len(keys) and (prefix is None or keys[following].startswith(prefix))
        return key if more else None

    async def count_matching(self, where: JobFilter) -> int:
        return sum(1 for job in self._s.jobs.values() if where.matches(job))

    async def apply_changes(self, changes: Sequence[tuple[Job, Change]], now_ms: int) -> list[Job]:
        done = []
        for job, change in changes:
            current = self._s.jobs.get(job.key)
            changed = None if current is None else self._s.apply(current, change)
            if changed is not None:
                done.append(changed)
        return done

    async def count_by_state(self, biz_type: str | None) -> dict[tuple[str, JobState], int]:
        return dict(
            Counter(
                (job.biz_type, job.state)
                for job in self._s.jobs.values()
                if biz_type is None or job.biz_type == biz_type
            )
        )

    async def recent_attempts(self, since_ms: int, biz_type: str | None) -> list[RecentAttempt]:
        return [
            RecentAttempt(job.biz_type, job.due_at, attempt, job.created_at)
            for job in self._s.jobs.values()
            if biz_type is None or job.biz_type == biz_type
            for attempt in job.history
            if attempt.at >= since_ms
        ]
