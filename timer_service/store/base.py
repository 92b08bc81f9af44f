"""The job-store port: every read and write the API, daemon and broker make.

Storage model (DESIGN.md "Storage"), which both adapters keep:

- A job lives in bucket ``second_of(next_attempt_at) % buckets``; its ``second``
  is the second it fires in next. Final jobs stay in their last bucket until
  retention ends.
- A locator maps ``(biz_type, job_id)`` to its bucket; its unique key is what
  makes create idempotent.
- The seconds index holds one entry per non-empty second with a version that
  every write into that second bumps *after* the job is written. The daemon
  removes an entry only if its version is still the one it read before loading
  the second (``release_second``), so a job added meanwhile is never missed.
- A claim moves pending jobs to dispatched under a claim token and the claiming
  daemon's fencing token; the broker sends only while the job is still
  dispatched under the claim its message carries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from timer_service.dispatch import Claimed, Outcome, SecondEntry, SendRef
from timer_service.model import BizType, Job, JobState


class CreateStatus(StrEnum):
    CREATED = "created"  # 201
    EXISTS = "exists"  # 200: same identity, same due_at and payload
    CONFLICT = "conflict"  # 409: same identity, different due_at or payload


@dataclass(frozen=True, slots=True)
class NewJob:
    biz_type: str
    job_id: str
    due_at: int
    payload_json: str
    # False when the request gave delay_ms: an existing job then matches on payload only.
    compare_due: bool = True


@dataclass(frozen=True, slots=True)
class CreateResult:
    status: CreateStatus
    job: Job


class JobStore(Protocol):
    """Async port; one implementation per backend. All times are epoch ms."""

    buckets: int

    # -- lifecycle ---------------------------------------------------------
    async def setup(self) -> None:
        """Create collections and indexes; idempotent."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the backend does not answer."""

    # -- biz types -----------------------------------------------------------
    async def put_biz_type(self, biz: BizType) -> bool:
        """Create or replace; True when created. Keeps created_at of a replaced one."""

    async def get_biz_type(self, name: str) -> BizType | None: ...

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]: ...

    async def list_biz_types(self) -> list[BizType]: ...

    async def delete_biz_type(self, name: str) -> bool:
        """False when unknown. Raises Conflict while it has pending or dispatched jobs."""

    # -- jobs: API -------------------------------------------------------------
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        """Create in request order with bulk writes; a repeated identity later in the
        list is compared with the earlier one. Concurrent creates of one identity
        leave exactly one job."""

    async def get_job(self, biz_type: str, job_id: str) -> Job | None: ...

    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        """pending|dispatched|cancelled -> cancelled. NotFound; Conflict if final."""

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        """A pending job moves to due_at (and the new payload, if given). NotFound;
        Conflict unless pending."""

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        """dead -> pending now, with a fresh attempt budget. NotFound; Conflict unless dead."""

    async def list_jobs(
        self, biz_type: str | None, state: JobState | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """Jobs in identity order after `cursor`; the next cursor or None at the end."""

    # -- daemon ------------------------------------------------------------------
    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        """Non-empty seconds in [from_s, to_s], oldest first. Never touches empty ones."""

    async def load_second(self, second: int) -> list[tuple[str, int]]:
        """(job key, next_attempt_at) of the pending jobs in `second`."""

    async def claim_due(
        self, second: int, upto_ms: int, claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        """pending jobs of `second` with next_attempt_at <= upto_ms -> dispatched under
        `claim`, conditional and batched; returns what this call claimed. Jobs last
        claimed under a higher fence are left alone."""

    async def mark_published(self, second: int, claim: str) -> None:
        """Record that the claim's messages were confirmed by the queue."""

    async def release_second(self, entry: SecondEntry) -> bool:
        """Delete the seconds entry if its version is unchanged; False if it moved on."""

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        published: bool | None = None,
        skip_biz_types: Collection[str] = (),
    ) -> list[Job]:
        """Dispatched jobs claimed before the given time, oldest claim first (the
        reconciler's input). `published` keeps only jobs whose message the queue did
        (True) or did not (False) confirm; `skip_biz_types` leaves those out, so that a
        page is never filled with jobs the caller would pass over."""

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        """Move still-dispatched jobs (same old claim) to a new claim; returns those moved."""

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        """How many jobs each biz type has in each of `states`; pairs with none are left
        out. Reads every such job once: meant for an occasional sample (the leading
        daemon's gauges), not a hot path."""

    def watch_seconds(self, stop: asyncio.Event | None = None) -> AsyncIterator[int]:
        """Seconds whose entry was created or bumped, as they happen; ends within about
        a second once `stop` is set (cancelling it instead may wait on the store). May
        raise if the backend cannot watch; the caller falls back to polling."""
        ...

    # -- lease and pointer ---------------------------------------------------
    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        """Take or renew the lease; the fencing token when held, else None. A takeover
        increases the token."""

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool: ...

    async def release_lease(self, name: str, holder: str, token: int) -> None: ...

    async def load_pointer(self, name: str) -> int | None: ...

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        """False when a holder with a higher fence has written it."""

    # -- broker --------------------------------------------------------------------
    async def fetch_for_send(self, refs: Sequence[SendRef]) -> dict[str, Job]:
        """Batched: of these, the jobs still dispatched under the claim the ref
        carries, by job key. Others (cancelled, stale duplicates) are absent."""

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """Batched: append each attempt to history and move the job to delivered,
        dead, or pending at next_attempt_at (a retry is a new timer). A job no
        longer dispatched (cancelled meanwhile) keeps its state."""

    async def broker_heartbeat(
        self, broker_id: str, holding: Sequence[str], expires_at_ms: int
    ) -> None:
        """A live broker says which biz types it holds messages of."""

    async def held_biz_types(self, now_ms: int) -> set[str]: ...

    async def broker_gone(self, broker_id: str) -> None: ...
