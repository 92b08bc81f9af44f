"""In-memory dispatch: the seconds index, claims and the reconciler's reads."""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, SecondEntry, sender_of
from timer_service.model import Job, JobState
from timer_service.partitions import partition_of_slot, second_of_slot, slot
from timer_service.store.memory.state import MemoryState


class MemoryDispatch:
    def __init__(self, state: MemoryState) -> None:
        self._s = state
        self._owned: frozenset[int] | None = None  # None: every partition

    def own(self, partitions: Collection[int] | None) -> None:
        self._owned = None if partitions is None else frozenset(partitions)

    def _partitions(self) -> list[int]:
        if self._owned is None:
            return list(range(self._s.partitions))
        return sorted(self._owned)

    def _mine(self, key: str) -> bool:
        return self._owned is None or self._s.partition(key) in self._owned

    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        slots = self._s.sorted_seconds
        found: dict[int, list[tuple[int, str]]] = {}
        for p in self._partitions():
            i = bisect.bisect_left(slots, slot(p, from_s))
            for at in slots[i : i + limit]:
                if at > slot(p, to_s):
                    break
                found.setdefault(second_of_slot(at), []).append((p, self._s.versions[at]))
        return [SecondEntry.merged(s, found[s]) for s in sorted(found)[:limit]]

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        for p in self._partitions():
            at = slot(p, second)
            if at in self._s.versions:
                self._s.stamps[at] = max(fence, self._s.stamps.get(at, 0))
        pending = self._s.pending_in_second.get(second, ())
        return [(key, due) for due, key in pending if self._mine(key)]

    async def claim_due(
        self,
        second: int,
        upto_ms: int,
        claim: str,
        fence: int,
        now_ms: int,
        limit: int | None = None,
    ) -> list[Claimed]:
        change = machine.claim(claim, fence, now_ms)
        jobs = self._s.jobs
        pending = self._s.pending_in_second.get(second, [])
        taken: list[str] = []
        looked = 0
        for due, key in pending:
            if due > upto_ms or (limit is not None and len(taken) == limit):
                break
            looked += 1
            if self._mine(key) and machine.claimable(jobs[key], upto_ms, fence):
                taken.append(key)
        # The taken jobs leave the pending list in one step: one at a time, each removal
        # from the front of a herd's list would move all of it.
        keys = set(taken)
        pending[:looked] = [entry for entry in pending[:looked] if entry[1] not in keys]
        if not pending:
            self._s.pending_in_second.pop(second, None)
        claimed = []
        for key in taken:  # each still pending: nothing awaited since the check
            changed = self._s.apply(jobs[key], change)
            if changed is not None:
                claimed.append(machine.claimed(changed, second))
        return claimed

    async def open_round(
        self, claim: str, fence: int, now_ms: int, closing: Collection[str] = ()
    ) -> None:
        self._s.rounds[claim] = (now_ms, fence)
        await self.close_rounds(closing)

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
                if self._mine(key):
                    out.append(job)
        for claim in old - named:
            del self._s.rounds[claim]
        out.sort(key=lambda j: j.claimed_at or 0)
        return out[:limit]

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        released = True
        owned = self._partitions()
        for p, v in entry.partition_versions():
            if p not in owned:
                continue  # another daemon's to release
            at = slot(p, entry.second)
            version = self._s.versions.get(at)
            if version is None:
                continue
            if version != v or self._s.stamps.get(at, 0) > fence:
                released = False
                continue
            del self._s.versions[at]
            self._s.stamps.pop(at, None)
            i = bisect.bisect_left(self._s.sorted_seconds, at)
            del self._s.sorted_seconds[i]
        return released

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
        wanted = set(seconds)
        for second in sorted(wanted):
            for key in self._s.jobs_in_second.get(second, ()):
                job = self._s.jobs[key]
                at = self._s.slot(key, second)
                if job.state == JobState.PENDING and self._mine(key) and at not in self._s.versions:
                    self._s.bump(at)

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
    ) -> list[Job]:
        bounds = claimed_before_by_biz or {}
        out = []
        for key in self._s.dispatched:
            job = self._s.jobs[key]
            before = min(claimed_before_ms, bounds.get(job.biz_type, claimed_before_ms))
            if (
                self._mine(key)
                and job.claimed_at is not None
                and job.claimed_at < before
                and not (unmarked_only and job.sending is not None)
            ):
                out.append(job)
        out.sort(key=lambda j: j.claimed_at or 0)
        return out[:limit]

    async def find_sent_by(self, broker_ids: Collection[str], limit: int) -> list[Job]:
        wanted = set(broker_ids)
        out = []
        for key in self._s.dispatched:
            job = self._s.jobs[key]
            if job.sending is not None and sender_of(job.sending) in wanted and self._mine(key):
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
            changed = self._s.apply(
                job, machine.reclaim(old.claim, claim, fence, now_ms, old.sending)
            )
            if changed is not None and changed.next_attempt_at is not None:
                out.append(machine.claimed(changed, self._s.second_of_job[job.key]))
        return out

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        wanted = set(states)
        jobs = self._s.jobs.values()
        return dict(Counter((j.biz_type, j.state) for j in jobs if j.state in wanted))

    def _owns_slot(self, at: int) -> bool:
        return self._owned is None or partition_of_slot(at) in self._owned

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
                    at = queue.get_nowait()
                    if self._owns_slot(at):
                        yield second_of_slot(at)
                    continue
                arrived = asyncio.ensure_future(queue.get())
                try:
                    await asyncio.wait((arrived, stopping), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not arrived.done():
                        arrived.cancel()  # the event, if any, stays queued
                if arrived.done() and not arrived.cancelled():
                    at = arrived.result()
                    if self._owns_slot(at):
                        yield second_of_slot(at)
        finally:
            stopping.cancel()
            self._s.watchers.remove(queue)
