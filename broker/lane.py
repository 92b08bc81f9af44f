"""One biz type's stream: hold each message until its moment, claim the send, send it within limits.

The token bucket and the in-flight cap are global (one broker consumes a biz
type's stream at a time); how the bucket holds across handovers and restarts is
broker.stored_bucket's.

A message arrives up to ~2 s before its ``next_attempt_at``. The lane keeps it
unacked in ``_held`` (ordered by that moment). Shortly before the moment
(``CHECK_AHEAD_MS``; up to ``MAX_CHECK_AHEAD_MS`` while the store answers
slowly) it marks, in one batched conditional write for the upcoming messages
that the rate limit and the in-flight cap will let go out within that window,
their jobs as being sent (`jobs.start_sending`: still dispatched under the
message's claim, no callback started). A job cancelled after publication, or a
stale duplicate, is not marked: its message is acked and nothing is sent. From
the mark on, a cancel answers "in flight" (409), so a 200 cancel is never
followed by a callback; the marked jobs wait in ``_ready`` until the wall
clock reaches their moment and a token and a slot are free, and are sent then.
A paused lane sends nothing and keeps holding (what was marked before the
pause goes out on resume).

Two more bounds on holding. No message stays unacked longer than
``max_hold_ms`` (broker.holdbound): a message held that long (a pause, a backlog,
a slow rate limit) is handed back to the queue, unsent, before RabbitMQ's
``consumer_timeout`` closes the channel. And a send waits for the
store's clock as well as this host's (broker.skew): a fast host clock cannot make
a callback early.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import math
import uuid

from broker.callback import Response, attempt_record, build_request
from broker.fate import (
    Fate,
    after_check,
    carry_out,
    check_failed,
    held_too_long,
    let_go_sent,
    not_ours,
)
from broker.held import Held, insert_ordered, sort_key
from broker.holdbound import HoldBound
from broker.judging import judge_answer, log_failure
from broker.marks import MarkWriter
from broker.outcomes import OutcomeWriter, Pending
from broker.pacing import MARK_SPAN_MS, Pacing
from broker.ratelimit import BucketClock, TokenBucket
from broker.sender import Sender
from broker.skew import SkewGuard
from broker.stored_bucket import StoredBucket
from broker.term import Stream
from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.dispatch import HeldBiz, Outcome
from timer_service.errors import StaleEpoch
from timer_service.logs import log_trace
from timer_service.metrics import Metrics
from timer_service.model import BizType, job_key
from timer_service.queue.base import Delivery
from timer_service.runtime import cancel_and_wait
from timer_service.store.ports.brokers import BrokersPort
from timer_service.tracing import NO_TRACING, Tracing

log = logging.getLogger(__name__)

# Marks in flight at once per lane: a herd's next batch is on its way while the store
# answers the one before (the budget below still bounds what is marked ahead). A
# trickle waits for the mark in flight instead, and goes in the next, larger batch.
MAX_CHECKS_IN_FLIGHT = 3
MIN_OVERLAPPING_BATCH = 32
SETTLE_POLL_S = 0.02  # how often `settle` looks
UNLEASED_POLL_S = 0.5  # a lane whose broker has no lease yet looks again this often


class Lane:
    def __init__(
        self,
        biz: BizType,
        *,
        sender: Sender,
        outcomes: OutcomeWriter,
        metrics: Metrics,
        clock: Clock,
        broker_id: str = "broker",
        skew: SkewGuard | None = None,
        max_hold_ms: int | None = None,
        tracing: Tracing = NO_TRACING,
        handover: bool = False,
        marks: MarkWriter,
        stream: Stream | None = None,
        buckets: BrokersPort | None = None,
    ) -> None:
        self.biz = biz
        self.stream = stream  # its term and ownership epoch (None: a lane alone, in a test)
        self.progress_s = clock.monotonic_s()  # when it last sent or settled a message
        # Made to take the stream over from a live broker (broker/ownership.py): the
        # first stream starts empty, not with a burst on top of the old owner's.
        self._starts_empty = handover
        self._broker_id = broker_id
        self._skew = skew or SkewGuard()
        taker = f"{broker_id}/{uuid.uuid4().hex[:8]}"
        self._stored = StoredBucket(buckets, taker, clock, self._skew)
        self._hold_bound = HoldBound(max_hold_ms)
        self._items: dict[Held, None] = {}  # every message not yet settled
        self._tracing = tracing
        self._sender = sender
        self._outcomes = outcomes
        self._marks = marks
        self._metrics = metrics
        self._clock = clock
        # The bound must hold between the sends' stamps and in real time alike.
        self._bucket_clock = BucketClock(
            self._skew.send_clock_ms(clock.now_ms(), clock.monotonic_s()), clock.monotonic_s()
        )
        self._bucket = TokenBucket(biz.rate_limit_per_s, biz.burst, self._send_clock_s())
        self._held: list[Held] = []  # not yet checked, by sort_key
        self._ready: list[Held] = []  # checked, waiting for moment / token / slot
        self._checking = 0
        self._pace = Pacing()
        self._in_flight = 0
        self._unsettled = 0  # sent; outcome not yet persisted and acked
        self._sent: dict[Held, None] = {}  # ... those messages, in send order
        self._by_key: dict[str, Held] = {}
        self._seq = itertools.count()
        self._sending = True
        self._checks: set[asyncio.Task[None]] = set()
        self._sends: set[asyncio.Task[None]] = set()
        self._chores: set[asyncio.Task[None]] = set()
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"lane-{self.biz.biz_type}")

    def configure(self, biz: BizType) -> None:
        """Apply a changed config; the next send uses it."""
        self.biz = biz
        self._bucket.reconfigure(biz.rate_limit_per_s, biz.burst, self._send_clock_s())
        self._wake()

    def stop_sending(self) -> None:
        self._sending = False
        self._wake()

    async def drain(self, timeout_s: float) -> bool:
        """Wait for callbacks in flight; True when none is left (and, once sending has
        stopped, the bucket is left for the next taker with its tokens)."""
        if self._sends:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(asyncio.wait(set(self._sends)), max(0.0, timeout_s))
        if not self._sends and not self._sending:
            tokens = self._bucket.tokens(self._send_clock_s())
            await self._stored.leave(self.biz.biz_type, tokens)
        return not self._sends

    async def settle(self, timeout_s: float) -> bool:
        """Wait until every callback sent has its outcome stored and its message acked:
        cancelling the consumer before would hand such a message to the next broker,
        which would send it again. True when none is left."""
        deadline = self._clock.monotonic_s() + timeout_s
        while (self._in_flight or self._unsettled) and self._clock.monotonic_s() < deadline:
            await self._clock.sleep(SETTLE_POLL_S)
        return not (self._in_flight or self._unsettled)

    async def let_go_of_sent(self) -> None:
        """Ack the message of every callback sent whose outcome is not stored yet (the
        store answers slowly): a planned let-go then hands the next owner only what
        was never sent (broker.fate.let_go_sent). Outcomes still come in as usual."""
        for item in list(self._sent):
            await carry_out(let_go_sent(), item.deliveries, self._metrics)

    async def close(self) -> None:
        """Stop everything; unsettled messages stay unacked for the queue to take back."""
        tasks = [t for t in (self._task,) if t is not None]
        tasks += list(self._checks) + list(self._sends) + list(self._chores)
        await cancel_and_wait(tasks, TASK_STOP_TIMEOUT_S, f"lane {self.biz.biz_type}", self._clock)

    def held(self) -> HeldBiz | None:
        """What this lane holds, for the broker's heartbeat: None when nothing."""
        if not self._items:
            return None
        return HeldBiz(
            self.biz.biz_type,
            sum(1 + len(item.twins) for item in self._items),
            min(item.delivery.job.claimed_at for item in self._items),
        )

    @property
    def holding(self) -> bool:
        """Messages of this biz type are held, checked, in flight or awaiting their outcome."""
        return bool(
            self._held or self._ready or self._checking or self._in_flight or self._unsettled
        )

    def ours(self) -> bool:
        """It may mark and send now: its broker's term is on, with lease to spare."""
        return self.stream is None or self.stream.term.valid()

    def stuck_s(self) -> float:
        """How long it has held a message due that its limits let out, without sending
        or settling any (0: not stuck; paused, or out of its term, is not stuck)."""
        if self.biz.paused or not (self._sending and self.ours() and self._items):
            return 0.0
        limited = self._in_flight >= self.biz.max_concurrency or self._bucket.wait_s(
            self._send_clock_s()
        )
        if limited or min(item.not_before for item in self._items) > self._clock.now_ms():
            return 0.0
        return max(0.0, self._clock.monotonic_s() - self.progress_s)

    def _holds_live(self) -> bool:
        """A message this lane holds is still on an open channel: the stream is still
        ours. Messages left from a channel that closed do not count (the stream went to
        another consumer, and may have come back after it spent)."""
        return any(item.delivery.live for item in itertools.chain(self._ready, self._held))

    async def _take_bucket(self) -> None:
        tokens = await self._stored.take(self.biz)
        if tokens is not None:
            self._bucket.at_most(tokens, self._send_clock_s())
        self._stored.known = True
        self._wake()

    # -- intake -------------------------------------------------------------------
    def offer(self, delivery: Delivery) -> None:
        if not self._stored.asked:
            self._stored.asked = True
            taking = asyncio.create_task(self._take_bucket())
            self._chores.add(taking)
            taking.add_done_callback(self._chores.discard)
        if self._starts_empty:
            self._starts_empty = False
            self._bucket.empty(self._send_clock_s())
        if delivery.redelivered and not self._bucket.unlimited and not self._holds_live():
            # Taken over from another holder (or our own closed channel): start a burst
            # below empty, which also covers what the old holder may still send before
            # it learns that its channel is gone.
            self._bucket.empty(self._send_clock_s(), debt=self.biz.burst)
        claimed = delivery.job
        key = job_key(claimed.biz_type, claimed.job_id)
        twin = self._by_key.get(key)
        if twin is not None and twin.delivery.job.claim == claimed.claim:
            # The same dispatch twice: one send is enough; both messages settle together.
            twin.twins.append(delivery)
            return
        received_s = self._clock.monotonic_s()
        item = Held(claimed.next_attempt_at, next(self._seq), delivery, key, received_s=received_s)
        self._items[item] = None
        if self._hold_bound.waiting(item):
            self._wake()
        self._by_key.setdefault(key, item)
        insert_ordered(self._held, item)
        self._wake()

    # -- the loop -------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                delay_s = self._step()
            except Exception:
                log.exception("lane step failed", extra={"biz_type": self.biz.biz_type})
                delay_s = 0.1
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiter = waiter
            try:
                await self._clock.wait_for(waiter, delay_s)
            except TimeoutError:
                pass  # the next thing to do is due
            finally:
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _step(self) -> float | None:
        """Send what may go now, start the next check; seconds until the next thing to do."""
        biz = self.biz
        if not self._sending:
            return None
        if not self.ours():  # no lease yet (a beat will come), or its term over: idle
            return UNLEASED_POLL_S
        mono = self._clock.monotonic_s()
        overdue, wait_s = self._hold_bound.overdue(mono, self._held, self._ready)
        for item in overdue:
            self._metrics.message_handed_back(biz.biz_type)
            self._settle(item, held_too_long())
        wait_ms = wait_s * 1000
        if biz.paused or not self._stored.known:  # the take wakes the lane
            return None if wait_ms == math.inf else wait_ms / 1000
        # Sends and marks go by the earlier of this host's clock and the store's.
        now = self._skew.send_clock_ms(self._clock.now_ms(), mono)
        ready = self._ready
        while ready:
            item = ready[0]
            if item.not_before > now:
                wait_ms = item.not_before - now
                break
            if self._in_flight >= biz.max_concurrency:
                self._note_limited(item)
                break  # a finishing callback wakes the lane
            if not self._bucket.try_take(self._bucket_s(now, mono)):
                self._note_limited(item)
                wait_ms = min(wait_ms, self._bucket.wait_s(self._bucket_s(now, mono)) * 1000)
                break
            ready.pop(0)
            if not item.prune():  # its channel closed: another broker has the message
                self._forget(item)
                self._metrics.message_dropped(biz.biz_type)
                continue
            self._start_send(item, fired_at=now)
        held = self._held
        if held and len(self._checks) < MAX_CHECKS_IN_FLIGHT:
            # Marks go on a beat all lanes share: the last multiple of MARK_SPAN_MS
            # before the head is within the look-ahead. Busy lanes then ask at the
            # same instants, and their asks share a store call (broker/marks.py).
            due_at = held[0].not_before - self._pace.check_ahead_ms
            beat_at = due_at - due_at % MARK_SPAN_MS
            if beat_at > now:
                wait_ms = min(wait_ms, beat_at - now)
            else:
                marked = len(self._ready) + self._checking
                bucket_s = self._bucket_s(now, mono)
                cap, in_flight = self.biz.max_concurrency, self._in_flight
                budget = self._pace.mark_budget(self._bucket, bucket_s, cap, in_flight, marked)
                reach = (now + self._pace.check_ahead_ms + MARK_SPAN_MS, math.inf)
                end = min(bisect.bisect_right(held, reach, key=sort_key), budget)
                if budget > 0 and (not self._checks or end >= MIN_OVERLAPPING_BATCH):
                    # One message per job in a batch: the store answers by job key.
                    batch: list[Held] = []
                    later: list[Held] = []
                    keys: set[str] = set()
                    for item in held[:end]:
                        (later if item.key in keys else batch).append(item)
                        keys.add(item.key)
                    held[:end] = later
                    self._start_check(batch)
                elif not ready and not self._bucket.unlimited:
                    lead_s = (
                        self._bucket.wait_s(self._bucket_s(now, mono))
                        - self._pace.check_ahead_ms / 1000
                    )
                    wait_ms = min(wait_ms, max(1.0, lead_s * 1000))
        return None if wait_ms == math.inf else wait_ms / 1000

    def _send_clock_s(self) -> float:
        """Bucket time now (broker.ratelimit.BucketClock)."""
        mono = self._clock.monotonic_s()
        return self._bucket_s(self._skew.send_clock_ms(self._clock.now_ms(), mono), mono)

    def _bucket_s(self, send_clock_ms: int, mono_s: float) -> float:
        """Bucket time at a send-clock and monotonic reading: seconds since the lane
        began (epoch seconds as a float would blur the milliseconds a token is made of)."""
        return self._bucket_clock.at(send_clock_ms, mono_s)

    def _note_limited(self, item: Held) -> None:
        if not item.limited:
            item.limited = True
            self._metrics.rate_limited(self.biz.biz_type)

    # -- check -------------------------------------------------------------------------
    def _start_check(self, batch: list[Held]) -> None:
        self._checking += len(batch)
        task = asyncio.create_task(self._check(batch))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check(self, batch: list[Held]) -> None:
        counted = len(batch)
        gone = [item for item in batch if not item.prune()]
        for item in gone:  # their channel closed: the queue has them back
            self._forget(item)
        batch = [item for item in batch if item not in gone]
        asked_at = self._clock.monotonic_s()
        try:
            epoch = None if self.stream is None else await self.stream.epoch()
            jobs = await self._marks.mark([item.ref_under(epoch) for item in batch])
        except StaleEpoch:  # another broker took the stream: back to the queue, unsent
            assert self.stream is not None
            self.stream.taken_by_another()
            for item in batch:
                self._settle(item, not_ours())
            return
        except Exception as exc:  # past the bound: hand the messages back
            log.error(
                "send check failed; requeueing",
                extra={"biz_type": self.biz.biz_type, "count": len(batch), "error": repr(exc)},
            )
            for item in batch:
                self._settle(item, check_failed())
            return
        finally:
            self._checking -= counted
            # Out of the bookkeeping before the lane wakes (a done callback would come
            # after its step, which then saw this mark still in flight and slept on).
            task = asyncio.current_task()
            if task is not None:
                self._checks.discard(task)
            self._wake()
        self._pace.learn_check_time((self._clock.monotonic_s() - asked_at) * 1000)
        for item in batch:
            job = jobs.get(item.key)
            fate = after_check(
                job_found=job is not None,
                claim_matches=job is not None and job.claim == item.delivery.job.claim,
            )
            if fate is not None:
                self._settle(item, fate)
                continue
            assert job is not None
            item.job = job
            if job.next_attempt_at is not None and job.next_attempt_at > item.not_before:
                item.not_before = job.next_attempt_at
                item.sort_key = (item.not_before, item.seq)
            insert_ordered(self._ready, item)
            if self._hold_bound.waiting(item):
                self._wake()

    # -- send ---------------------------------------------------------------------------
    def _start_send(self, item: Held, fired_at: int) -> None:
        """`fired_at`: the wall-clock instant its token was taken. Stamped then, not when the
        send task gets to run, the sends' timestamps keep the bucket's spacing: a loop busy
        for a few ms would otherwise make the rate look exceeded in the callbacks' own
        `fired_at` (seen by the chaos run: 3 sends in 246 ms against a bound of 2 + 4/s)."""
        self._in_flight += 1
        self._unsettled += 1
        self._sent[item] = None
        task = asyncio.create_task(self._send(item, fired_at))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _send(self, item: Held, fired_at: int) -> None:
        biz = self.biz
        job = item.job
        assert job is not None
        if not self.ours():  # frozen or cut off since its token was taken
            self._in_flight, self._unsettled = self._in_flight - 1, self._unsettled - 1
            self._settle(item, not_ours())
            self._wake()
            return
        self.progress_s = self._clock.monotonic_s()
        attempt = job.attempts + 1
        span = self._tracing.callback_started(job, attempt)
        with log_trace(span.traceparent):  # the attempt's lines join the job's trace
            request = build_request(biz, job, attempt, fired_at, span.traceparent)
            self._metrics.callback_sent(biz.biz_type, attempt, (fired_at - job.fires_at) / 1000)
            if job.next_attempt_at is not None and fired_at < job.next_attempt_at:
                self._metrics.callback_early(biz.biz_type, (job.next_attempt_at - fired_at) / 1000)
            started = self._clock.monotonic_s()
            try:
                response = await self._sender.post(biz.callback_url, request, biz.timeout_ms / 1000)
            except Exception as exc:  # whatever went wrong is this attempt's failure
                log.exception("callback failed unexpectedly", extra={"biz_type": biz.biz_type})
                response = Response(None, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            finally:
                self._in_flight -= 1
                self._wake()
            duration_s = max(0.0, self._clock.monotonic_s() - started)
            self._pace.learn_callback_time(duration_s * 1000)
            known_at = self._clock.now_ms()
            verdict = judge_answer(response, biz, job, attempt, known_at)
            self._metrics.callback_outcome(biz.biz_type, verdict.kind.value, duration_s)
            span.end(verdict.kind.value, response.status_code)
            log_failure(biz.biz_type, job.job_id, attempt, verdict)
            took_ms = round(duration_s * 1000)
            record = attempt_record(attempt, fired_at, response, verdict, took_ms, (biz, request))
            outcome = Outcome(item.ref, verdict.kind, record, verdict.next_attempt_at)
            self._outcomes.submit(Pending(outcome, item.deliveries, lambda: self._settled(item)))

    def _settled(self, item: Held) -> None:
        self._unsettled -= 1
        self.progress_s = self._clock.monotonic_s()
        self._sent.pop(item, None)
        self._forget(item)

    # -- helpers ----------------------------------------------------------------------------
    def _settle(self, item: Held, fate: Fate) -> None:
        """An unsent message's fate, carried out in the background."""
        self.progress_s = self._clock.monotonic_s()
        self._forget(item)
        task = asyncio.create_task(carry_out(fate, item.deliveries, self._metrics))
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def _forget(self, item: Held) -> None:
        self._items.pop(item, None)
        if self._by_key.get(item.key) is item:
            del self._by_key[item.key]
