"""In-memory dispatch: the seconds index, claims and the reconciler's reads."""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import Job, JobState
from timer_service.store.memory.state import MemoryState


class MemoryDispatch:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        seconds = self._s.sorted_seconds
        i = bisect.bisect_left(seconds, from_s)
        out = []
        for s in seconds[i : i + limit]:
            if s > to_s:
                break
            out.append(SecondEntry(s, self._s.versions[s]))
        return out

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        if second in self._s.versions:
            self._s.stamps[second] = max(fence, self._s.stamps.get(second, 0))
        out = []
        for key in self._s.jobs_in_second.get(second, ()):
            job = self._s.jobs[key]
            if job.state == JobState.PENDING and job.next_attempt_at is not None:
                out.append((key, job.next_attempt_at))
        return out

    async def claim_due(
        self, second: int, upto_ms: int, claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        change = machine.claim(claim, fence, now_ms)
        claimed = []
        for key in list(self._s.jobs_in_second.get(second, ())):
            job = self._s.jobs[key]
            if machine.claimable(job, upto_ms, fence):
                changed = self._s.apply(job, change)
                if changed is not None:
                    claimed.append(machine.claimed(changed, second))
        return claimed

    async def open_round(self, claim: str, fence: int, now_ms: int) -> None:
        self._s.rounds[claim] = (now_ms, fence)

    async def close_rounds(self, claims: Collection[str]) -> None:
        for claim in claims:
            self._s.rounds.pop(claim, None)

    async def find_unpublished(
        self, opened_before_ms: int, limit: int, *, fence_below: int | None = None
    ) -> list[Job]:
        old = {
            claim
            for claim, (opened_at, fence) in self._s.rounds.items()
            if opened_at < opened_before_ms and (fence_below is None or fence < fence_below)
        }
        if not old:
            return []
        named: set[str] = set()
        out = []
        for key in self._s.dispatched:
            job = self._s.jobs[key]
            if job.claim in old and job.sending is None:
                named.add(job.claim)
                out.append(job)
        for claim in old - named:
            del self._s.rounds[claim]
        out.sort(key=lambda j: j.claimed_at or 0)
        return out[:limit]

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        version = self._s.versions.get(entry.second)
        if version is None:
            return True
        if version != entry.version or self._s.stamps.get(entry.second, 0) > fence:
            return False
        del self._s.versions[entry.second]
        self._s.stamps.pop(entry.second, None)
        i = bisect.bisect_left(self._s.sorted_seconds, entry.second)
        del self._s.sorted_seconds[i]
        return True

    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        overdue = sorted(
            (job.next_attempt_at, self._s.second_of_job[key])
            for key, job in self._s.jobs.items()
            if job.state == JobState.PENDING
            and job.next_attempt_at is not None
            and job.next_attempt_at < before_ms
        )
        return sorted({second for _, second in overdue[:limit]})

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        for second in sorted(seconds):
            if second not in self._s.versions:
                self._s.bump(second)

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        skip_biz_types: Collection[str] = (),
    ) -> list[Job]:
        skip = set(skip_biz_types)
        out = []
        for key in self._s.dispatched:
            job = self._s.jobs[key]
            if (
                job.claimed_at is not None
                and job.claimed_at < claimed_before_ms
                and job.biz_type not in skip
            ):
                out.append(job)
        out.sort(key=lambda j: j.claimed_at or 0)
        return out[:limit]

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        return 0  # nothing here expires

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        out = []
        for old in jobs:
            job = self._s.jobs.get(old.key)
            if job is None or old.claim is None or job.fence > fence:
                continue
            changed = self._s.apply(job, machine.reclaim(old.claim, claim, fence, now_ms))
            if changed is not None and changed.next_attempt_at is not None:
                out.append(machine.claimed(changed, self._s.second_of_job[job.key]))
        return out

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        wanted = set(states)
        jobs = self._s.jobs.values()
        return dict(Counter((j.biz_type, j.state) for j in jobs if j.state in wanted))

    async def watch_seconds(  # type: ignore[override]
        self, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        """Ends at once when `stop` is set, and when cancelled. It waits for the next
        event or `stop`, whichever comes first, with `asyncio.wait`, which never
        swallows a cancellation: Python 3.11's `asyncio.wait_for` returned an event
        that arrived in the same turn as the cancel, and the watch ran on."""
        queue: asyncio.Queue[int] = asyncio.Queue()
        self._s.watchers.append(queue)
        stopping = asyncio.ensure_future((stop or asyncio.Event()).wait())
        try:
            while not stopping.done():
                if not queue.empty():
                    yield queue.get_nowait()
                    continue
                arrived = asyncio.ensure_future(queue.get())
                try:
                    await asyncio.wait((arrived, stopping), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not arrived.done():
                        arrived.cancel()  # the event, if any, stays queued
                if arrived.done() and not arrived.cancelled():
                    yield arrived.result()
        finally:
            stopping.cancel()
            self._s.watchers.remove(queue)
