"""The guarantees under partial failure, model-based (hypothesis, stateful).

The real daemon (lease, scanner, publisher, reconciler, overdue sweep) and the
real broker lane with its outcome writer run against the in-memory store
wrapped in `FaultyStore`, on one `FakeClock`, through the in-process queue; the
endpoint is a fake sender. Rules create, cancel, reschedule and replay jobs as a
client would, let time pass, change what the endpoint answers, and inject
faults: a call that fails before it applies, one that applies and loses its
reply, a call that stalls (a paused process) until healed. After each step:

- never early: no callback before the `next_attempt_at` it was claimed for;
- cancelled means never called back: a callback after a 200 cancel only when
  the broker's send mark (`start_sending`) came before the cancel was answered,
  which the cancel then answers 409 instead: so never;
- a second callback of one attempt only when a fault was injected while that
  attempt was in flight (since the callback of the attempt before; a paused
  daemon whose lease lapsed mid-claim republishes its claim on retaking it).

At the end, faults healed, failed creates retried as a client would, the
endpoint answering 200, and `SETTLE_MS` of time run: nothing accepted is lost,
and every job ends `delivered` or `dead`, or `cancelled` if a cancel was asked.

Deterministic (derandomized, no example database). `TIMER_MODEL_EXAMPLES` and
`TIMER_MODEL_STEPS` run it longer, e.g. `TIMER_MODEL_EXAMPLES=2000
TIMER_MODEL_STEPS=60 .venv/bin/pytest tests/unit/test_guarantees_model.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.callback import CallbackRequest, Response
from broker.lane import Lane
from broker.marks import MarkWriter
from broker.outcomes import OutcomeWriter
from tests.unit.daemon_harness import Harness
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, SendRef
from timer_service.errors import CallbackInFlight, Conflict, NotFound, StoreUnavailable
from timer_service.jobs import CreateStatus, NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType, Job, JobState, RetryPolicy, job_key
from timer_service.queue.base import Delivery
from timer_service.store.faulty import FAULTABLE, FaultyStore
from timer_service.store.memory import MemoryStore

T = TypeVar("T")

EXAMPLES = int(os.environ.get("TIMER_MODEL_EXAMPLES", "150"))
STEPS = int(os.environ.get("TIMER_MODEL_STEPS", "30"))

BIZ = "orders"
T0 = 1_767_225_600_000
RECONCILE_AFTER_MS = 10_000
RETRY = RetryPolicy(max_attempts=3, initial_backoff_ms=500, max_backoff_ms=2000, multiplier=2.0)
# Healed, everything settles within: the reconciler's 1.5 timeouts, the outcome
# writer's and the pre-send check's give-up bounds (20 s, 10 s), three attempts.
SETTLE_MS = 120_000
JOB_IDS = ("a", "b", "c", "d", "e")
API_CALLS = ("create_jobs", "cancel_job", "reschedule_job", "replay_job")
# The daemon's and the broker's calls (every call of their ports, so a new one is
# covered): these may also stall (a paused process).
DAEMON_PORTS = ("scan", "rounds", "reconcile", "sweep", "counts", "leases", "pointers")
BROKER_PORTS = ("outcomes", "brokers")
BACKGROUND_CALLS = tuple(
    sorted(m for m, port in FAULTABLE.items() if port in DAEMON_PORTS + BROKER_PORTS)
)


@dataclass(frozen=True, slots=True)
class Cleared:
    """The broker's store marked this job as being sent (`start_sending`)."""

    seq: int
    at_ms: int
    next_attempt_at: int | None


@dataclass(frozen=True, slots=True)
class Sent:
    seq: int
    at_ms: int
    job_id: str
    attempt: int
    not_before: int | None  # the next_attempt_at it was cleared for
    cleared_seq: int | None
    faults_before: int  # faults injected until then


class Events:
    """One sequence for everything the checks order: clearances, cancels, sends."""

    def __init__(self) -> None:
        self.seq = 0

    def next(self) -> int:
        self.seq += 1
        return self.seq


class WatchedOutcomes:
    """The broker's outcomes port, noting what its store cleared for sending, and when."""

    def __init__(self, port: Any, clock: FakeClock, events: Events) -> None:
        self._port = port
        self._clock = clock
        self._events = events
        self.cleared: dict[str, Cleared] = {}

    def _note(self, jobs: dict[str, Job]) -> dict[str, Job]:
        for key, job in jobs.items():
            self.cleared[key] = Cleared(
                self._events.next(), self._clock.now_ms(), job.next_attempt_at
            )
        return jobs

    async def start_sending(
        self, refs: Sequence[SendRef], send_token: str, now_ms: int
    ) -> dict[str, Job]:
        return self._note(await self._port.start_sending(refs, send_token, now_ms))

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        await self._port.record_outcomes(outcomes, now_ms)


class Endpoint:
    """The business endpoint: answers what the model says, records every callback."""

    def __init__(
        self, clock: FakeClock, events: Events, outcomes: WatchedOutcomes, faulty: FaultyStore
    ) -> None:
        self._clock = clock
        self._events = events
        self._outcomes = outcomes
        self._faulty = faulty
        self.status = 200
        self.sent: list[Sent] = []

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        body = json.loads(request.body)
        cleared = self._outcomes.cleared.get(job_key(BIZ, body["job_id"]))
        self.sent.append(
            Sent(
                self._events.next(),
                self._clock.now_ms(),
                body["job_id"],
                body["attempt"],
                None if cleared is None else cleared.next_attempt_at,
                None if cleared is None else cleared.seq,
                len(self._faulty.injected),
            )
        )
        return Response(self.status)


class Guarantees(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock(T0)
        self.events = Events()
        self.inner = MemoryStore(buckets=60)
        self.store = FaultyStore(self.inner)
        self.accepted: set[str] = set()
        self.unanswered: dict[str, NewJob] = {}  # creates that failed: retried at the end
        self.cancelled_at: dict[str, int] = {}  # the event of the first 200 cancel
        self.cancel_asked: set[str] = set()
        self.checked_sends = 0
        self.stepping: asyncio.Task[int] | None = None
        self.run(self._start())

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    async def _start(self) -> None:
        biz = BizType(BIZ, "http://endpoint.invalid/cb", retry=RETRY)
        await self.inner.biz_types.put_biz_type(biz)
        self.daemon = Harness(
            self.store,  # type: ignore[arg-type]
            self.clock,
            reconcile_after_ms=RECONCILE_AFTER_MS,
        )
        watched = WatchedOutcomes(self.store.outcomes, self.clock, self.events)
        self.watched = watched
        metrics = Metrics()
        self.endpoint = Endpoint(self.clock, self.events, watched, self.store)
        self.writer = OutcomeWriter(watched, metrics, self.clock)
        self.writer.start()
        self.lane = Lane(
            biz,
            marks=MarkWriter(watched, metrics, self.clock, "broker"),
            sender=self.endpoint,  # type: ignore[arg-type]
            outcomes=self.writer,
            metrics=metrics,
            clock=self.clock,
        )
        self.lane.start()

        async def deliver(delivery: Delivery) -> None:
            self.lane.offer(delivery)

        self.consumer = await self.daemon.queue.consume(BIZ, deliver, prefetch=100)

    # -- time ----------------------------------------------------------------------
    async def _advance(self, ms: int) -> None:
        """Let `ms` pass: the daemon steps at its wake times (a stalled step stays in
        flight while time goes on), the lane and the outcome writer wait on the clock."""
        end = self.clock.now_ms() + ms
        while True:
            if self.stepping is None:
                self.stepping = asyncio.create_task(self.daemon.step(through_faults=True))
            now = self.clock.now_ms()
            await self.clock.run_until(self.stepping.done, max(0, end - now))
            if not self.stepping.done():
                return  # stalled until healed; time has reached the end
            wake = self.stepping.result()
            self.stepping = None
            now = self.clock.now_ms()
            if now >= end:
                return
            await self.clock.run_for(min(max(wake, now + 1), end) - now)

    @rule(ms=st.integers(1, 30_000))
    def time_passes(self, ms: int) -> None:
        self.run(self._advance(ms))

    # -- the client ------------------------------------------------------------------
    @rule(job_id=st.sampled_from(JOB_IDS), delay_ms=st.integers(0, 30_000))
    def create(self, job_id: str, delay_ms: int) -> None:
        new = NewJob(BIZ, job_id, self.clock.now_ms() + delay_ms, "null")
        self.run(self._create(new))

    async def _create(self, new: NewJob) -> None:
        try:
            [result] = await self.store.jobs.create_jobs([new], self.clock.now_ms())
        except StoreUnavailable:
            self.unanswered.setdefault(new.job_id, new)
            return
        if self.unanswered.get(new.job_id) == new:
            del self.unanswered[new.job_id]  # answered at last (a 409 is an answer too)
        if result.status in (CreateStatus.CREATED, CreateStatus.EXISTS):
            self.accepted.add(new.job_id)

    @rule(job_id=st.sampled_from(JOB_IDS))
    def cancel(self, job_id: str) -> None:
        self.cancel_asked.add(job_id)
        try:
            job = self.run(self.store.jobs.cancel_job(BIZ, job_id, self.clock.now_ms()))
        except (StoreUnavailable, NotFound, Conflict, CallbackInFlight):
            return
        assert job.state == JobState.CANCELLED, f"a 200 cancel answered {job}"
        self.cancelled_at.setdefault(job_id, self.events.next())

    @rule(job_id=st.sampled_from(JOB_IDS), delay_ms=st.integers(0, 30_000))
    def reschedule(self, job_id: str, delay_ms: int) -> None:
        due = self.clock.now_ms() + delay_ms
        try:
            self.run(self.store.jobs.reschedule_job(BIZ, job_id, due, None, self.clock.now_ms()))
        except (StoreUnavailable, NotFound, Conflict):
            return

    @rule(job_id=st.sampled_from(JOB_IDS))
    def replay(self, job_id: str) -> None:
        try:
            job = self.run(self.store.jobs.replay_job(BIZ, job_id, self.clock.now_ms()))
        except (StoreUnavailable, NotFound, Conflict):
            return
        assert job.state in (JobState.PENDING, JobState.DISPATCHED), f"a replay answered {job}"

    @rule(status=st.sampled_from((200, 200, 503, 400)))
    def endpoint_answers(self, status: int) -> None:
        self.endpoint.status = status

    # -- faults ----------------------------------------------------------------------
    @rule(
        method=st.sampled_from(API_CALLS + BACKGROUND_CALLS),
        when=st.sampled_from(("before", "after")),
        times=st.integers(1, 3),
    )
    def fail(self, method: str, when: str, times: int) -> None:
        self.store.fail(method, when, times)  # type: ignore[arg-type]

    @rule(rate=st.sampled_from((0.05, 0.2, 0.5)), seed=st.integers(0, 2**32 - 1))
    def fail_at_random(self, rate: float, seed: int) -> None:
        """Until healed, every call of the daemon and the broker fails with p = rate,
        before or after applying (one seeded rng per method, so a shrunk case replays)."""
        for i, method in enumerate(BACKGROUND_CALLS):
            self.store.fail_randomly(rate, random.Random(seed + i), [method])

    @rule(method=st.sampled_from(BACKGROUND_CALLS))
    def stall(self, method: str) -> None:
        self.store.stall(method)

    @rule(times=st.integers(1, 2))
    def tear(self, times: int) -> None:
        """The next writes of a job into a second (a create or a move: reschedule,
        replay, a retry into another second) write the job and lose the bump of its
        second's index entry and the reply: a process killed between the two writes
        (issue 13, item 1). Only the overdue sweep can find such a job again."""
        self.inner.state.torn += times

    @rule()
    def heal(self) -> None:
        self.store.heal()
        self.inner.state.torn = 0

    # -- after every step ----------------------------------------------------------------
    @invariant()
    def callbacks_keep_the_promises(self) -> None:
        sent = self.endpoint.sent
        for send in sent[self.checked_sends :]:
            key = job_key(BIZ, send.job_id)
            assert send.not_before is not None, f"sent without being cleared: {send}"
            assert send.at_ms >= send.not_before, (
                f"early: expected at or after {send.not_before}, sent at {send.at_ms}: {send}"
            )
            cancelled = self.cancelled_at.get(send.job_id)
            if cancelled is not None and cancelled < send.seq:
                assert send.cleared_seq is not None and send.cleared_seq < cancelled, (
                    f"called back after a 200 cancel (event {cancelled}) without having been "
                    f"cleared before it: {send}, {self.watched.cleared.get(key)}"
                )
            mine = [s for s in sent[: sent.index(send)] if s.job_id == send.job_id]
            if any(s.attempt == send.attempt for s in mine):
                # In flight: from the end of the attempt before (its callback) on.
                earlier = [s.faults_before for s in mine if s.attempt < send.attempt]
                since = max(earlier, default=0)
                assert send.faults_before > since, (
                    f"a second callback of attempt {send.attempt} with no fault while it was "
                    f"in flight: {send}, after {mine}; faults: {self.store.injected}"
                )
        self.checked_sends = len(sent)

    def teardown(self) -> None:
        try:
            self.run(self._settle())
            self.callbacks_keep_the_promises()
            self._check_ends()
        finally:
            self.run(self._stop())
            self.loop.close()

    async def _settle(self) -> None:
        """Faults stop, the client retries what failed, the endpoint answers 200."""
        self.store.heal()
        self.inner.state.torn = 0
        self.endpoint.status = 200
        for new in list(self.unanswered.values()):
            await self._create(new)
        assert not self.unanswered, f"creates still failing once healed: {self.unanswered}"
        await self._advance(SETTLE_MS)

    def _check_ends(self) -> None:
        for job_id in sorted(self.accepted):
            assert job_key(BIZ, job_id) in self.inner.state.jobs, f"accepted job {job_id} lost"
        for key, job in sorted(self.inner.state.jobs.items()):
            ended = (JobState.DELIVERED, JobState.DEAD, JobState.CANCELLED)
            assert job.state in ended, (
                f"{key} did not end within {SETTLE_MS} ms of healing: {job}; "
                f"faults: {self.store.injected}"
            )
            if job.state == JobState.CANCELLED:
                assert job.job_id in self.cancel_asked, f"{key} cancelled unasked: {job}"

    async def _stop(self) -> None:
        self.store.heal()
        tasks = [t for t in (self.stepping, self.daemon._watch) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.consumer.cancel()
        await self.lane.close()
        await self.writer.stop()
        await self.daemon.daemon.publisher.close(0)
        # Whatever else is still waiting (the queue's pumps, settling acks) ends with the loop.
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)


Guarantees.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
test_guarantees_under_faults = Guarantees.TestCase
