"""Driving a Daemon by hand in tests: FakeClock + MemoryStore + a queue that
remembers when it published what."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from daemon.app import Daemon
from tests.unit.settings_harness import settings as cached_settings
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording
from timer_service.tracing import NO_TRACING, Tracing

BIZ = "orders"
CLAIM_AHEAD_MS = 1000


class RecordingQueue(MemoryQueue):
    """Remembers when each job was published, by the fake clock. Stands in for
    RabbitMQ: its messages count as outliving a daemon (`durable`), unless a test
    says otherwise."""

    durable = True

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.record = True
        self.clock = clock
        self.at: list[tuple[int, Claimed]] = []

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        await super().publish(jobs)
        now = self.clock.now_ms()
        self.at.extend((now, job) for job in jobs)

    def times(self, job_id: str) -> list[int]:
        return [t for t, job in self.at if job.job_id == job_id]


def settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "lease_ttl_ms": 3000,
        "reconcile_after_ms": 60_000,
        "claim_ahead_ms": CLAIM_AHEAD_MS,
        "lookahead_ms": 5000,
        "catchup_rate_per_s": 5000,
        "publish_batch": 100,
    }
    values.update(overrides)
    return cached_settings(**values)


class Harness:
    def __init__(
        self,
        store: MemoryStore,
        clock: FakeClock,
        watch: bool = True,
        tracing: Tracing = NO_TRACING,
        durable_queue: bool = True,
        **overrides: object,
    ) -> None:
        self.store = store
        self.clock = clock
        self.queue = RecordingQueue(clock)
        self.queue.durable = durable_queue  # False: the in-process queue of `dev`
        self.daemon = Daemon(
            settings(**overrides),
            store,
            self.queue,
            Metrics(),
            clock,
            holder_id=f"d-{id(self)}",
            tracing=tracing,
        )
        # The change stream, as the daemon's watch task feeds it in production.
        self._watch = asyncio.create_task(self._feed_watch()) if watch else None

    async def _feed_watch(self) -> None:
        async for second in self.store.scan.watch_seconds():
            self.daemon.nudge(second)

    async def step(self, through_faults: bool = False) -> int:
        """One round; the time the daemon wants to run again. `through_faults`: a part
        that fails is given up for this round, as the daemon's loops do (each catches
        and goes on), instead of failing the test."""
        await asyncio.sleep(0)  # let the watch deliver what happened since the last round
        await self.daemon.lease.tick()
        wake = self.clock.now_ms() + 100  # the scan loop's back-off after an error
        with _caught(through_faults):
            wake = await self.daemon.scanner.run_once()
        await self.daemon.publisher.drain()
        with _caught(through_faults):
            await self.daemon.reconciler.maybe_run(self.daemon.scanner.last_claim_ms)
        with _caught(through_faults):
            await self.daemon.sweeper.maybe_run()
        return min(
            wake,
            self.daemon.lease.next_action_ms(),
            self.daemon.reconciler.next_sweep_ms(),
            self.daemon.sweeper.next_sweep_ms(),
        )


def _caught(through_faults: bool) -> contextlib.AbstractContextManager[object]:
    return contextlib.suppress(Exception) if through_faults else contextlib.nullcontext()


async def run_until(
    end_ms: int, *harnesses: Harness, max_step_ms: int = 1000, through_faults: bool = False
) -> int:
    """Drive the daemons as their loops would: jump the clock to the earliest wake time.
    Returns the number of rounds."""
    clock = harnesses[0].clock
    rounds = 0
    while True:
        wakes = [await h.step(through_faults) for h in harnesses]
        rounds += 1
        now = clock.now_ms()
        if now >= end_ms:
            return rounds
        clock.set(max(now + 1, min(min(wakes), now + max_step_ms, end_ms)))


async def create(store: MemoryStore, now: int, *jobs: tuple[str, int], biz: str = BIZ) -> None:
    await store.jobs.create_jobs([NewJob(biz, job_id, due, "null") for job_id, due in jobs], now)


# -- fixtures (offered to every unit test by tests/unit/conftest.py) ---------------------


@pytest.fixture
def store() -> MemoryStore:
    """A one-partition memory store whose calls are counted (`store.ops`)."""
    return recording(MemoryStore(buckets=60))  # type: ignore[return-value]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_767_225_600_000)
