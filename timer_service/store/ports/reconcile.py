"""The reconciler's port: dispatched jobs nobody will deliver, found and claimed again.

A job left dispatched (a claim never published, a message lost, a broker gone
after its send mark) is found here and reclaimed under a new claim; what makes
delivery at-least-once (docs/architecture.md, "Reconciler").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from timer_service.dispatch import Claimed
from timer_service.model import Job


class ReconcilePort(Protocol):
    async def find_unpublished(
        self, opened_before_ms: int, limit: int, *, fence_below: int | None = None
    ) -> list[Job]:
        """Jobs still dispatched, not being sent, under the claim of a round opened
        before the given time (by a daemon whose fence is below `fence_below`, if
        given) and never closed: claimed and never confirmed by the queue. Rounds that
        no longer name such a job are closed on the way."""
        ...

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
        not_sent_by: Collection[str] = (),
    ) -> list[Job]:
        """Dispatched jobs claimed before the given time, oldest claim first (the
        reconciler's input). `claimed_before_by_biz` sets an earlier bound for some biz
        types (what a live broker may still hold is left out, so that a page is never
        filled with jobs the caller would pass over); `unmarked_only` leaves out jobs
        whose send has started; `not_sent_by` leaves out jobs whose send mark one of
        these brokers made (`dispatch.sender_of`): live brokers, whose callback is on
        its way."""
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
