"""The scan loop's port: the non-empty-seconds index and claims at the due moment.

- Every call of a daemon's ports covers the partitions its scan port `own`s: the
  index has an entry per (partition, second), and a `SecondEntry` merges those of
  one second.
- A job lives in bucket ``second_of(next_attempt_at) % buckets``; its ``second``
  is the second it fires in next.
- The seconds index holds one entry per non-empty second with a version that
  every write into that second renews *after* the job is written. The daemon
  removes an entry only if its version is still the one it read before loading
  the second (``release_second``), so a job added meanwhile is never missed.
- A daemon that loads a second stamps its fence on the entry; a release with a
  lower fence misses, so a deposed daemon's late release cannot drop a second
  that its successor has taken on.
- A claim moves pending jobs to dispatched under a claim token and the claiming
  daemon's fencing token (`jobs.claim`), inside a round (`RoundsPort`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from typing import Protocol

from timer_service.dispatch import Claimed, SecondEntry


class ScanPort(Protocol):
    def own(self, partitions: Collection[int] | None) -> None:
        """Scope every later call of this store's daemon ports (scan, rounds,
        reconcile, sweep) to jobs and index entries of these partitions (None: all of
        them). A daemon owns some partitions (timer_service/partitions.py);
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

    async def find_claim(self, second: int, claim: str) -> list[Claimed]:
        """The jobs of `second` still dispatched under `claim`, as `claim_due` returns
        them: what a claim that raised claimed all the same (its reply lost after it
        applied), found by its token at once instead of at the reconcile timeout."""
        ...

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        """Delete the seconds entry if its version is unchanged and no higher fence
        has loaded it; False if it moved on (or was taken on by a newer daemon). Only
        the owned partitions' entries of that second are touched."""
        ...

    def watch_seconds(self, stop: asyncio.Event | None = None) -> AsyncIterator[int]:
        """Seconds whose entry was created or bumped, as they happen; ends within about
        a second once `stop` is set (cancelling it instead may wait on the store). May
        raise if the backend cannot watch; the caller falls back to polling."""
        ...
