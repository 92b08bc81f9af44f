"""Publishing claimed jobs: chunks, confirms, retries, then their claims' rounds closed.

A claim's round (daemon/rounds.py) is closed once every message of the claim
is confirmed (the publisher says so, `Rounds.confirmed` writes it): the jobs of
one claim may go out in several chunks, and through several biz types' workers,
so the publisher counts what each claim still has on its way. A claim any of
whose messages was given up stays open, for the reconciler.

Every wait (between retries, for the workers to finish) is on the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.dispatch import Claimed
from timer_service.metrics import Metrics
from timer_service.queue.base import DispatchQueue
from timer_service.runtime import cancel_and_wait
from timer_service.tracing import NO_TRACING, Tracing

log = logging.getLogger(__name__)


class ClaimTokens:
    """Unique claim tokens: this daemon's short id, its fence, a counter."""

    def __init__(self, holder: str) -> None:
        self._prefix = f"{uuid.uuid5(uuid.NAMESPACE_OID, holder).hex[:8]}{uuid.uuid4().hex[:4]}"
        self._counter = itertools.count(1)

    def next(self, fence: int) -> str:
        return f"{self._prefix}.{fence}.{next(self._counter)}"


class Publisher:
    def __init__(
        self,
        queue: DispatchQueue,
        metrics: Metrics,
        clock: Clock,
        batch: int,
        rounds_confirmed: Callable[[Sequence[str]], None],
        retry_max_wait_s: float = 2.0,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self._queue = queue
        self._tracing = tracing
        self._metrics = metrics
        self._clock = clock
        self._batch = batch
        # Told of the claims whose every message is confirmed (daemon/rounds.py).
        self._rounds_confirmed = rounds_confirmed
        self._retry_max_wait_s = retry_max_wait_s
        # Told of every confirmed chunk (recurring schedules create their next
        # occurrence there); must not raise and must return quickly.
        self.on_published: Callable[[Sequence[Claimed]], Awaitable[None]] | None = None
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._unconfirmed: Counter[str] = Counter()  # claim -> messages not yet confirmed
        self._given_up: set[str] = set()  # claims whose round stays open
        self._backlogs: dict[str, list[tuple[Sequence[Claimed], Callable[[], bool]]]] = {}

    def submit(self, jobs: Sequence[Claimed], keep_trying: Callable[[], bool]) -> None:
        """Hand claimed jobs to one publishing worker per biz type and return at once.

        A herd of one biz type (100,000 jobs due in one second) takes seconds to
        publish; awaited in the scan loop it would hold back every other biz
        type's claims behind it. With a worker per biz type the herd publishes
        beside the others, not in front of them.
        """
        self._expect(jobs)
        by_biz: dict[str, list[Claimed]] = {}
        for job in jobs:
            by_biz.setdefault(job.biz_type, []).append(job)
        for biz_type, items in by_biz.items():
            backlog = self._backlogs.setdefault(biz_type, [])
            backlog.append((items, keep_trying))
            worker = self._workers.get(biz_type)
            if worker is None or worker.done():
                self._workers[biz_type] = asyncio.create_task(
                    self._work(biz_type), name=f"publish-{biz_type}"
                )

    async def _work(self, biz_type: str) -> None:
        backlog = self._backlogs[biz_type]
        while backlog:
            items, keep_trying = self._take(backlog)
            try:
                await self._publish(items, keep_trying)
            except Exception:  # publish() retries itself; this is a bug guard
                log.exception("publishing failed", extra={"biz_type": biz_type})
        self._backlogs.pop(biz_type, None)
        self._workers.pop(biz_type, None)

    def _take(
        self, backlog: list[tuple[Sequence[Claimed], Callable[[], bool]]]
    ) -> tuple[Sequence[Claimed], Callable[[], bool]]:
        """The next claims to publish: after a stall (RabbitMQ away, a slow confirm) the
        backlog holds many small claims, one per tick; they go out together, up to one
        batch, instead of one confirm round each."""
        items, keep_trying = backlog.pop(0)
        if not backlog or len(items) + len(backlog[0][0]) > self._batch:
            return items, keep_trying
        merged, checks = list(items), [keep_trying]
        while backlog and len(merged) + len(backlog[0][0]) <= self._batch:
            more, check = backlog.pop(0)
            merged.extend(more)
            checks.append(check)
        return merged, lambda: all(check() for check in checks)

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for submitted jobs to be published; True when nothing is left."""
        deadline = None if timeout_s is None else self._clock.monotonic_s() + timeout_s
        while self._workers:
            remaining = None if deadline is None else deadline - self._clock.monotonic_s()
            if remaining is not None and remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(asyncio.wait(list(self._workers.values())), remaining)
        return True

    async def close(self, grace_s: float) -> None:
        """Finish what was submitted within `grace_s`, then stop; what is left stays
        claimed and unpublished, for the reconciler of the next leader."""
        await self.drain(grace_s)
        await cancel_and_wait(self._workers.values(), TASK_STOP_TIMEOUT_S, "publisher", self._clock)
        self._workers.clear()
        self._backlogs.clear()
        self._unconfirmed.clear()
        self._given_up.clear()

    async def publish(self, jobs: Sequence[Claimed], keep_trying: Callable[[], bool]) -> bool:
        """Publish and close the claims' rounds; True when all were confirmed.

        A failed chunk is retried while `keep_trying()` (this daemon still
        leads). Given up, the jobs stay dispatched with their round open: the
        reconciler of whichever daemon leads then publishes them again.
        """
        self._expect(jobs)
        return await self._publish(jobs, keep_trying)

    def _expect(self, jobs: Sequence[Claimed]) -> None:
        self._unconfirmed.update(job.claim for job in jobs)

    async def _publish(self, jobs: Sequence[Claimed], keep_trying: Callable[[], bool]) -> bool:
        for start in range(0, len(jobs), self._batch):
            chunk = jobs[start : start + self._batch]
            spans = self._tracing.dispatch_started(chunk)
            confirmed = await self._publish_chunk(chunk, keep_trying)
            spans.end(confirmed)
            if not confirmed:
                self._settle(jobs[start:], confirmed=False)
                return False
            published_at = self._clock.now_ms()
            for job in chunk:
                self._metrics.job_dispatched(
                    job.biz_type, (published_at - job.next_attempt_at) / 1000
                )
            self._rounds_confirmed(self._settle(chunk, confirmed=True))
            if self.on_published is not None:
                await self.on_published(chunk)
        return True

    def _settle(self, jobs: Sequence[Claimed], confirmed: bool) -> list[str]:
        """Count these messages as done; the claims now wholly confirmed."""
        done = []
        for job in jobs:
            claim = job.claim
            if not confirmed:
                self._given_up.add(claim)
            self._unconfirmed[claim] -= 1
            if self._unconfirmed[claim] <= 0:
                del self._unconfirmed[claim]
                if claim in self._given_up:
                    self._given_up.discard(claim)
                else:
                    done.append(claim)
        return done

    async def _publish_chunk(
        self, chunk: Sequence[Claimed], keep_trying: Callable[[], bool]
    ) -> bool:
        def stop(_: RetryCallState) -> bool:
            return not keep_trying()

        def before_sleep(state: RetryCallState) -> None:
            self._metrics.publish_failed()
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "publish not confirmed, retrying",
                extra={"jobs": len(chunk), "attempt": state.attempt_number, "error": repr(exc)},
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=0.05, max=self._retry_max_wait_s),
            stop=stop,
            before_sleep=before_sleep,
            sleep=self._clock.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._queue.publish(chunk)
        except Exception as exc:  # no longer leader: leave it to the reconciler
            self._metrics.publish_failed()
            log.warning(
                "publish given up: no longer leader",
                extra={"jobs": len(chunk), "error": repr(exc)},
            )
            return False
        return True
