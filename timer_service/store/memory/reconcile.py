"""In-memory reconciler reads and reclaims."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, sender_of
from timer_service.model import Job
from timer_service.store.memory.scope import Scoped


class MemoryReconcile(Scoped):
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

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
        not_sent_by: Collection[str] = (),
    ) -> list[Job]:
        bounds = claimed_before_by_biz or {}
        senders = set(not_sent_by)
        out = []
        for key in self._s.dispatched:
            job = self._s.jobs[key]
            before = min(claimed_before_ms, bounds.get(job.biz_type, claimed_before_ms))
            if (
                self._mine(key)
                and job.claimed_at is not None
                and job.claimed_at < before
                and not (unmarked_only and job.sending is not None)
                and not (job.sending is not None and sender_of(job.sending) in senders)
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
                claimed = machine.claimed(changed, self._s.second_of_job[job.key])
                out.append(replace(claimed, bucket=self._s.home[job.key]))
        return out
