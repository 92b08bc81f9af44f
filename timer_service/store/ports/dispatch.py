"""The scan daemon's dispatch: the non-empty-seconds index, claims, the reconciler.

- Every call covers the partitions the caller `own`s: the index has an entry per
  (partition, second), and a `SecondEntry` merges those of one second.

- A job lives in bucket ``second_of(next_attempt_at) % buckets``; its ``second``
  is the second it fires in next.
- The seconds index holds one entry per non-empty second with a version that
  every write into that second renews *after* the job is written. The daemon
  removes an entry only if its version is still the one it read before loading
  the second (``release_second``), so a job added meanwhile is never missed.
- A daemon that loads a second stamps its fence on the entry; a release with a
  lower fence misses, so a deposed daemon's late release cannot drop a second
  that its successor has taken on.
- A pending job whose entry is missing (a crash between the job's write and
  its bump) is found by ``find_overdue_pending`` and its entry restored.
- A claim moves pending jobs to dispatched under a claim token and the claiming
  daemon's fencing token (`jobs.claim`). Before it, the daemon opens a *round*
  for the token; it closes the round once the queue confirmed every message of
  the claim. A round still open long after it was opened names jobs that were
  claimed and never published (a crash, a lost reply): one record per claim,
  not a write per job, is what tells them from jobs a broker holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Protocol

from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import Job, JobState


class DispatchPort(Protocol):
    def own(self, partitions: Collection[int] | None) -> None:
        """Scope every later call to jobs and index entries of these partitions (None:
        all of them). A daemon owns some partitions (timer_service/partitions.py);
        owning all costs the same queries as a store with one."""
        ...

    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        """Non-empty seconds in [from_s, to_s], oldest first. Never touches empty ones."""
        ...

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        """Stamp `fence` on the second's entry, then (job key, next_attempt_at) of
        its pending jobs."""
        ...

    async def claim_due(
        self,
        second: int,
        upto_ms: int,
        claim: str,
        fence: int,
        now_ms: int,
        limit: int | None = None,
    ) -> list[Claimed]:
        """`jobs.claim` for the jobs of `second` that `jobs.claimable` admits,
        conditional and batched; returns what this call claimed. With `limit`, only
        the first `limit` of them in (next_attempt_at, key) order: a call that
        returns `limit` jobs may have left more."""
        ...

    async def open_round(
        self, claim: str, fence: int, now_ms: int, closing: Collection[str] = ()
    ) -> None:
        """Record that claims under this token may be made from now on; and, in the
        same write, `close_rounds(closing)`."""
        ...

    async def close_rounds(self, claims: Collection[str]) -> None:
        """Every message of these claims was confirmed by the queue."""
        ...

    async def find_unpublished(
        self, opened_before_ms: int, limit: int, *, fence_below: int | None = None
    ) -> list[Job]:
        """Jobs still dispatched, not being sent, under the claim of a round opened
        before the given time (by a daemon whose fence is below `fence_below`, if
        given) and never closed: claimed and never confirmed by the queue. Rounds that
        no longer name such a job are closed on the way."""
        ...

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        """Delete the seconds entry if its version is unchanged and no higher fence
        has loaded it; False if it moved on (or was taken on by a newer daemon). Only
        the owned partitions' entries of that second are touched."""
        ...

    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        """Seconds holding pending jobs due before `before_ms`, oldest first (at most
        `limit` jobs read): what a sweep re-indexes."""
        ...

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        """Create the entries of these seconds where there are none (an existing entry
        already leads the scanner to its jobs, and is left as it is)."""
        ...

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
    ) -> list[Job]:
        """Dispatched jobs claimed before the given time, oldest claim first (the
        reconciler's input). `claimed_before_by_biz` sets an earlier bound for some biz
        types (what a live broker may still hold is left out, so that a page is never
        filled with jobs the caller would pass over); `unmarked_only` leaves out jobs
        whose send has started."""
        ...

    async def find_sent_by(self, broker_ids: Collection[str], limit: int) -> list[Job]:
        """Dispatched jobs whose send mark one of these brokers made
        (`dispatch.sender_of`), oldest claim first."""
        ...

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        """`jobs.reclaim` of still-dispatched jobs (same old claim, and the send mark
        each had when read: none, or the same one); returns those moved."""
        ...

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        """Keep the identity records of jobs that still live long after they were set
        to fire (a biz type paused for days) from expiring before their jobs; the
        number kept. Stores whose identities never expire do nothing."""
        ...

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        """How many jobs each biz type has in each of `states`; pairs with none are left
        out. Reads every such job once: meant for an occasional sample (the leading
        daemon's gauges), not a hot path."""
        ...

    def watch_seconds(self, stop: asyncio.Event | None = None) -> AsyncIterator[int]:
        """Seconds whose entry was created or bumped, as they happen; ends within about
        a second once `stop` is set (cancelling it instead may wait on the store). May
        raise if the backend cannot watch; the caller falls back to polling."""
        ...
