"""Admission control: a bound on the `/v1` requests at work at once, beyond which the
API answers 503 + `Retry-After` promptly instead of queueing without limit.

A burst of 5,000 creates taken all at once made every request wait on the store,
let 4,903 clients time out and grew the API's memory fourfold (docs/operations.md,
"Overload"). Here at most `max_inflight` requests run; a request beyond that waits
for a slot, first come first served, for at most `max_wait_ms`, and only when the
requests ahead of it are likely to be done by then (judged from the recent time a
request holds its slot); any other is refused at once. So every answer comes
within `max_wait_ms` plus one request's own work, and the memory held is bounded
by the slots and the short queue.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque

from starlette.types import ASGIApp, Receive, Scope, Send

from timer_service.api.problems import OVERLOADED, problem_response
from timer_service.clock import Clock
from timer_service.metrics import Metrics

GATED_PREFIX = "/v1/"
# /readyz answers 503 while the gate refused a request this recently.
SHEDDING_HOLD_MS = 1000
# The slot-hold time assumed before any request has finished: a create on a busy store.
# Cautious, so a cold burst queues few (640 at the defaults) rather than thousands that
# would wait their whole second for slots a slow store does not free.
INITIAL_HOLD_MS = 100.0
HOLD_SMOOTHING = 0.1  # weight of the newest request in the moving average
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 30


class AdmissionGate:
    """Counts requests at work; hands a freed slot to the longest waiter."""

    def __init__(self, max_inflight: int, max_wait_ms: int, clock: Clock, metrics: Metrics):
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be at least 1, not {max_inflight}")
        self.max_inflight = max_inflight
        self.max_wait_ms = max_wait_ms
        self._clock = clock
        self._metrics = metrics
        self.inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.hold_ms = INITIAL_HOLD_MS  # moving average of how long a request holds a slot
        self.shed = 0  # requests refused so far
        self._last_shed_ms: int | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def shedding(self) -> bool:
        """The gate refused a request within the last SHEDDING_HOLD_MS."""
        last = self._last_shed_ms
        return last is not None and self._clock.now_ms() - last < SHEDDING_HOLD_MS

    def max_waiting(self) -> int:
        """How many waiters the slots can serve within `max_wait_ms` at the recent pace."""
        return int(self.max_inflight * self.max_wait_ms / max(self.hold_ms, 1.0))

    def retry_after_s(self) -> int:
        """Roughly when the work ahead is done: what a refused client is told to wait."""
        backlog_ms = (self.inflight + self.waiting) * self.hold_ms / self.max_inflight
        return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(backlog_ms / 1000)))

    async def enter(self) -> bool:
        """Take a slot (True), or be refused (False) at once or after `max_wait_ms`."""
        if self.inflight < self.max_inflight and not self._waiters:
            self._took_slot()
            return True
        if self.waiting >= self.max_waiting():
            return self._refused()
        turn = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await self._clock.wait_for(asyncio.shield(turn), self.max_wait_ms / 1000)
        except TimeoutError:
            if turn.done():  # handed a slot just as the wait ended: keep it
                return True
            self._waiters.remove(turn)
            return self._refused()
        except BaseException:
            if turn.done():
                self.leave(None)  # cancelled after it was handed a slot: pass it on
            else:
                self._waiters.remove(turn)
            raise
        return True

    def leave(self, held_ms: float | None) -> None:
        """A request that held a slot for `held_ms` (None: not used) is done: its slot
        goes to the next waiter, if any."""
        if held_ms is not None:
            self.hold_ms += HOLD_SMOOTHING * (held_ms - self.hold_ms)
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands; inflight stays
                return
        self.inflight -= 1
        self._metrics.api_inflight(self.inflight)

    def _took_slot(self) -> None:
        self.inflight += 1
        self._metrics.api_inflight(self.inflight)

    def _refused(self) -> bool:
        self.shed += 1
        self._last_shed_ms = self._clock.now_ms()
        self._metrics.api_request_shed()
        return False


class AdmissionMiddleware:
    """Runs `/v1` requests through the gate; health, metrics and docs pass untouched."""

    def __init__(self, app: ASGIApp, gate: AdmissionGate, clock: Clock) -> None:
        self.app = app
        self.gate = gate
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(GATED_PREFIX):
            await self.app(scope, receive, send)
            return
        gate = self.gate
        if not await gate.enter():
            detail = (
                f"The API is at its limit of {gate.max_inflight} requests at work"
                f" (TIMER_API_MAX_INFLIGHT); retry after Retry-After seconds (creates are"
                " idempotent: retrying one is safe)."
            )
            headers = {"Retry-After": str(gate.retry_after_s())}
            response = problem_response(503, detail, headers=headers, type_=OVERLOADED)
            await response(scope, receive, send)
            return
        started = self._clock.monotonic_s()
        try:
            await self.app(scope, receive, send)
        finally:
            gate.leave((self._clock.monotonic_s() - started) * 1000)
