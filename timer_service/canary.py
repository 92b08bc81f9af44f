"""The canary: a job of the service's own every interval, which goes the whole way
(store, daemon, queue, broker, an HTTP callback to the API's `/canary`), so that an
operator learns firing has stopped even when no business job is due
(docs/operations.md, "Canary").

Every API replica runs one. Each names its jobs by their slot (`slot-<due_ms>`, due at
the next multiple of the interval) with the same payload, so however many replicas
run, idempotent create leaves one job per slot. Its biz type is reserved
(`constants.CANARY_BIZ_TYPE`): no business can name it, and no listing, stats or
per-biz-type metric shows it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from timer_service.clock import Clock
from timer_service.constants import CANARY_BIZ_TYPE, TASK_STOP_TIMEOUT_S
from timer_service.errors import VersionMismatch
from timer_service.jobs import CreateResult, NewJob
from timer_service.model import BizType, RetryPolicy
from timer_service.registration import Registrar
from timer_service.runtime import cancel_and_wait
from timer_service.signing import generate_secret
from timer_service.store.ports.biz_types import BizTypesPort

log = logging.getLogger(__name__)

PAYLOAD_JSON = "{}"  # the same for every replica: their creates of a slot agree
# A canary answered late is still news; one that never arrives is what the alert is for.
TIMEOUT_MS = 2000
RETRY = RetryPolicy(max_attempts=3, initial_backoff_ms=500, max_backoff_ms=2000, multiplier=2)
RATE_LIMIT_PER_S = 100.0  # far above one a slot: never what holds a canary back


def slot_job_id(due_ms: int) -> str:
    return f"slot-{due_ms}"


def next_slot_ms(now_ms: int, interval_ms: int) -> int:
    """The first multiple of the interval after `now_ms`: every replica picks the same."""
    return (now_ms // interval_ms + 1) * interval_ms


def canary_biz_type(callback_url: str, secret: str, now_ms: int) -> BizType:
    return BizType(
        biz_type=CANARY_BIZ_TYPE,
        callback_url=callback_url,
        rate_limit_per_s=RATE_LIMIT_PER_S,
        burst=10,
        max_concurrency=4,
        timeout_ms=TIMEOUT_MS,
        retry=RETRY,
        signing_secret=secret,
        created_at=now_ms,
        updated_at=now_ms,
    )


class Canary:
    def __init__(
        self,
        biz_types: BizTypesPort,
        registrar: Registrar,
        clock: Clock,
        *,
        interval_ms: int,
        callback_url: str,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("a canary needs an interval above 0 (0 means no canary)")
        self._biz_types = biz_types
        self._registrar = registrar
        self._clock = clock
        self.interval_ms = interval_ms
        self.callback_url = callback_url
        self._ready = False
        self._task: asyncio.Task[None] | None = None

    async def ensure_biz_type(self) -> BizType:
        """The canary's biz type as this replica wants it, put once: its secret is made
        by whichever replica puts it first and kept by every later put."""
        now = self._clock.now_ms()
        stored = await self._biz_types.get_biz_type(CANARY_BIZ_TYPE)
        if stored is None or stored.signing_secret is None:
            wanted = canary_biz_type(self.callback_url, generate_secret(), now)
            try:
                await self._biz_types.put_biz_type(wanted, create_only=stored is None)
                return wanted
            except VersionMismatch:  # another replica put it first: theirs stands
                return await self._stored()
        wanted = replace(
            canary_biz_type(self.callback_url, stored.signing_secret, now),
            created_at=stored.created_at,
        )
        if replace(stored, updated_at=now) == wanted:
            return stored
        try:
            await self._biz_types.put_biz_type(wanted, only_if_updated_at=stored.updated_at)
        except VersionMismatch:
            return await self._stored()
        log.info("canary biz type updated", extra={"callback_url": self.callback_url})
        return wanted

    async def _stored(self) -> BizType:
        stored = await self._biz_types.get_biz_type(CANARY_BIZ_TYPE)
        if stored is None:
            raise VersionMismatch("the canary's biz type changed while it was put")
        return stored

    async def create_next(self) -> CreateResult:
        """The job of the next slot (created, or already there from another replica)."""
        due = next_slot_ms(self._clock.now_ms(), self.interval_ms)
        new = NewJob(CANARY_BIZ_TYPE, slot_job_id(due), due, PAYLOAD_JSON)
        [result] = await self._registrar.register([new], self._clock.now_ms())
        if not isinstance(result, CreateResult):  # only an unknown biz type is refused
            raise result
        return result

    async def tick(self) -> None:
        """One interval's work: the biz type once, then the next slot's job."""
        if not self._ready:
            await self.ensure_biz_type()
            self._ready = True
        await self.create_next()

    async def run(self) -> None:
        """Every slot, until cancelled; a store that fails costs a slot, not the task."""
        while True:
            try:
                await self.tick()
            except Exception as exc:
                log.warning("canary job not created", extra={"error": repr(exc)})
            now = self._clock.now_ms()
            await self._clock.sleep((next_slot_ms(now, self.interval_ms) - now) / 1000)

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="canary")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task], TASK_STOP_TIMEOUT_S, "canary", self._clock)
            self._task = None
