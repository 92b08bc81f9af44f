"""Driving the broker in tests: a real HTTP receiver that records callbacks, a
stand-in for the daemon, and a `world` of MemoryStore + MemoryQueue + Broker on a
FakeClock. `Receiver` and `DaemonStandIn` take the system clock in the integration
tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from broker.app import Broker
from timer_service.clock import Clock, FakeClock, SystemClock
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType, Job, JobState, RetryPolicy, second_of
from timer_service.runtime import cancel_and_wait
from timer_service.settings import Settings
from timer_service.store.base import Store

# -- shared helpers ----------------------------------------------------------------


@dataclass
class Received:
    at_ms: float
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


# (record) -> (status, extra headers, seconds to wait before answering)
Answer = tuple[int, dict[str, str], float]
Responder = Callable[[Received], Answer | Awaitable[Answer]]


@dataclass
class Receiver:
    """A loopback HTTP endpoint that records every callback with its arrival time."""

    responder: Responder | None = None
    # (record) -> the body of the answer (none when unset or when it answers None)
    body_for: Callable[[Received], bytes | None] | None = None
    received: list[Received] = field(default_factory=list)
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: dict[str, int] = field(default_factory=dict)
    port: int = 0
    clock: Clock = field(default_factory=SystemClock)  # arrival times, slow answers
    _runner: web.AppRunner | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{biz}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, biz: str) -> str:
        return f"http://127.0.0.1:{self.port}/{biz}"

    def for_job(self, job_id: str) -> list[Received]:
        return [r for r in self.received if r.json["job_id"] == job_id]

    def for_biz(self, biz: str) -> list[Received]:
        return [r for r in self.received if r.path == f"/{biz}"]

    async def _handle(self, request: web.Request) -> web.Response:
        at_ms = self.clock.now_ms()
        biz = request.match_info["biz"]
        record = Received(at_ms, request.path, dict(request.headers), await request.read())
        self.received.append(record)
        self.in_flight[biz] = self.in_flight.get(biz, 0) + 1
        self.max_in_flight[biz] = max(self.max_in_flight.get(biz, 0), self.in_flight[biz])
        try:
            status, headers, delay_s = 200, {}, 0.0
            if self.responder is not None:
                answer = self.responder(record)
                if not isinstance(answer, tuple):
                    answer = await answer
                status, headers, delay_s = answer
            if delay_s:
                # Hanging answers end when the receiver stops, so teardown is quick.
                with contextlib.suppress(TimeoutError):
                    await self.clock.wait_for(self._closing.wait(), delay_s)
            body = None if self.body_for is None else self.body_for(record)
            return web.Response(status=status, headers=headers, body=body)
        finally:
            self.in_flight[biz] -= 1


class DaemonStandIn:
    """Plays the daemon for tests: claims pending jobs up to 1.5 s ahead and publishes them."""

    def __init__(
        self, store: Store, queue: Any, ahead_ms: int = 1500, clock: Clock | None = None
    ) -> None:
        self._store = store
        self._queue = queue
        self._ahead_ms = ahead_ms
        self._clock = clock or SystemClock()
        self._task: asyncio.Task[None] | None = None
        self.seconds: set[int] = set()
        self._stopping = False

    def watch(self, due_ms: Iterable[int]) -> None:
        self.seconds.update(second_of(ms) for ms in due_ms)

    async def dispatch_once(self) -> int:
        """Claim and publish what is due in the watched seconds. A second wholly past
        that has nothing left to claim is no longer watched (a retry into it is watched
        again by `follow_retries`): claiming every past second every 50 ms cost the
        embedded store hundreds of commands a second that the real daemon never makes."""
        now = self._clock.now_ms()
        published = 0
        for second in sorted(s for s in self.seconds if s * 1000 <= now + self._ahead_ms):
            claimed = await self._store.scan.claim_due(
                second, now + self._ahead_ms, uuid.uuid4().hex, 1, now
            )
            if claimed:
                await self._queue.publish(claimed)
                published += len(claimed)
            elif (second + 1) * 1000 <= now:
                self.seconds.discard(second)
        return published

    async def follow_retries(self, jobs: Iterable[tuple[str, str]]) -> None:
        """Keep watching the seconds these jobs' retries land in."""
        for biz, job_id in jobs:
            job = await self._store.jobs.get_job(biz, job_id)
            if job is not None and job.state == JobState.PENDING and job.next_attempt_at:
                self.seconds.add(second_of(job.next_attempt_at))

    def run(self, jobs: list[tuple[str, str]], every_s: float = 0.05) -> None:
        async def loop() -> None:
            while not self._stopping:
                await self.follow_retries(jobs)
                await self.dispatch_once()
                await self._clock.sleep(every_s)

        self._task = asyncio.create_task(loop())

    async def stop(self) -> None:
        # The flag ends the loop even if a driver call swallows the cancellation.
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait([self._task], 10, "daemon stand-in")


def now_ms() -> int:
    return int(time.time() * 1000)


async def create(
    store: Store,
    biz: str,
    job_ids: Iterable[str],
    due_at: int,
    payload: Any = None,
    created_at: int | None = None,
) -> list[tuple[str, str]]:
    news = [
        NewJob(biz, j, due_at, json.dumps(payload if payload is not None else {"j": j}))
        for j in job_ids
    ]
    await store.jobs.create_jobs(news, now_ms() if created_at is None else created_at)
    return [(n.biz_type, n.job_id) for n in news]


async def wait_for_states(
    store: Store,
    jobs: Iterable[tuple[str, str]],
    states: set[JobState],
    timeout_s: float,
    clock: FakeClock | None = None,
) -> list[Job]:
    """Poll every 20 ms: of real time, or of a FakeClock's, which runs meanwhile. A poll
    reads the jobs in order and stops at the first not yet in `states`; a full read
    confirms the end. Re-reading 150 jobs every 20 ms was most of the embedded store's
    load in the isolation tests (~900 reads/s), enough to fail them on a loaded machine."""
    jobs = list(jobs)
    monotonic_s = time.monotonic if clock is None else clock.monotonic_s
    deadline = monotonic_s() + timeout_s
    done = 0  # jobs[:done] were seen in `states`
    while True:
        while done < len(jobs):
            f = await store.jobs.get_job(*jobs[done])
            if f is None or f.state not in states:
                break
            done += 1
        if done == len(jobs):
            found = [await store.jobs.get_job(b, j) for b, j in jobs]
            if all(f is not None and f.state in states for f in found):
                return [f for f in found if f is not None]
            done = 0
        if monotonic_s() > deadline:
            found = [await store.jobs.get_job(b, j) for b, j in jobs]
            tally = Counter(f.state.value if f else None for f in found)
            off = [
                f"{b}/{j}={f.state.value if f else None}"
                for (b, j), f in zip(jobs, found, strict=True)
                if f is None or f.state not in states
            ]
            raise AssertionError(
                f"expected all {sorted(states)} within {timeout_s}s, got {dict(tally)}"
                f" (first: {off[:5]})"
            )
        await (asyncio.sleep(0.02) if clock is None else clock.run_for(20))


def fast_retry(max_attempts: int = 5, initial_ms: int = 100) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=max_attempts,
        initial_backoff_ms=initial_ms,
        max_backoff_ms=2000,
        multiplier=2.0,
    )


# -- fixtures ----------------------------------------------------------------------------


@dataclass
class World:
    store: Any
    queue: Any
    broker: Broker
    receiver: Receiver
    daemon: DaemonStandIn
    metrics: Metrics
    clock: FakeClock

    async def put_biz(self, name: str, **config: Any) -> BizType:
        biz = BizType(name, self.receiver.url(name), **config)
        await self.store.biz_types.put_biz_type(biz)
        return biz

    async def create(
        self, biz: str, job_ids: Iterable[str], due_at: int, payload: Any = None
    ) -> list[tuple[str, str]]:
        return await create(self.store, biz, job_ids, due_at, payload, self.clock.now_ms())

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


@contextlib.asynccontextmanager
async def world_with(
    memory_store: Any, clock: FakeClock | None = None, **settings: Any
) -> AsyncIterator[World]:
    """A world whose broker runs with these settings (and a 3 s shutdown grace); on
    `clock` if given (e.g. the store's own)."""
    from timer_service.queue.memory import MemoryQueue

    clock = clock or FakeClock(max_step_ms=10)  # callbacks go over loopback HTTP meanwhile
    queue = MemoryQueue()
    receiver = Receiver(clock=clock)
    await receiver.start()
    metrics = Metrics()
    config = Settings(**{"shutdown_grace_s": 3, **settings})
    broker = Broker(config, memory_store, queue, metrics, clock, broker_id="b1")
    daemon = DaemonStandIn(memory_store, queue, clock=clock)
    yield World(memory_store, queue, broker, receiver, daemon, metrics, clock)
    await daemon.stop()
    await clock.drive(broker.stop())
    await receiver.stop()


@pytest.fixture
async def world(memory_store: Any) -> AsyncIterator[World]:
    async with world_with(memory_store) as w:
        yield w


async def started(w: World) -> None:
    await w.broker.start()
