"""In-memory scan: the seconds index and claims."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Collection
from dataclasses import replace

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import JobState
from timer_service.partitions import second_of_slot, slot
from timer_service.store.memory.scope import Scoped


class MemoryScan(Scoped):
    def own(self, partitions: Collection[int] | None) -> None:
        self._scope.own(partitions)

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
        named = self._named(second)
        home = self._s.home
        return [(key, due) for due, key in pending if self._mine(key) and home[key] in named]

    def _named(self, second: int) -> set[int]:
        """Where this second's jobs are read, as on MongoDB: the buckets its entries
        name (a job in another is not seen)."""
        return self._s.buckets_named([slot(p, second) for p in self._partitions()], second)

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
        named = self._named(second)
        home = self._s.home
        taken: list[str] = []
        looked = 0
        for due, key in pending:
            if due > upto_ms or (limit is not None and len(taken) == limit):
                break
            looked += 1
            mine = self._mine(key) and home[key] in named
            if mine and machine.claimable(jobs[key], upto_ms, fence):
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
                claimed.append(replace(machine.claimed(changed, second), bucket=home[key]))
        return claimed

    async def find_claim(self, second: int, claim: str) -> list[Claimed]:
        # A rare call (after a claim that raised): a walk of the jobs, no index kept.
        home, seconds = self._s.home, self._s.second_of_job
        mine = [
            (key, job)
            for key, job in self._s.jobs.items()
            if job.claim == claim and job.state == JobState.DISPATCHED
        ]
        return [
            replace(machine.claimed(job, second), bucket=home[key])
            for key, job in mine
            if seconds.get(key) == second
        ]

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
            self._s.drop_entry(at)
        return released

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
