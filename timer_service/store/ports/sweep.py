"""The overdue sweep's port: repairs of what a crash between two writes left.

A pending job whose seconds entry is missing (a crash between the job's write and
its bump) is found by ``find_overdue_pending`` and its entry restored.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol


class SweepPort(Protocol):
    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        """Seconds holding pending jobs due before `before_ms`, oldest first (at most
        `limit` jobs read): what a sweep re-indexes."""
        ...

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        """Create the entries of these seconds where there are none (an existing entry
        already leads the scanner to its jobs, and is left as it is)."""
        ...

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        """Keep the identity records of jobs that still live long after they were set
        to fire (a biz type paused for days) from expiring before their jobs; the
        number kept. Stores whose identities never expire do nothing."""
        ...
