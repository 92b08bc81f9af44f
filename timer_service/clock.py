"""Time, injected: the system clock in production, a hand-driven one in tests.

Every wait goes through the clock too (`sleep`, `wait_for`), so a test on a
`FakeClock` moves time by hand and nothing in it sleeps for real.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock epoch milliseconds."""
        ...

    def monotonic_s(self) -> float:
        """Monotonic seconds, for measuring intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed on this clock."""
        ...

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        """`awaitable`'s result; TimeoutError (and `awaitable` cancelled) once
        `timeout_s` have passed on this clock first. None waits as long as it takes."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        # A timeout around the await, not asyncio.wait_for: no task per call (the
        # lane waits like this after every step).
        async with asyncio.timeout(timeout_s):
            return await awaitable


# A FakeClock.run_* round moves time only once the loop has had nothing to run for
# this many turns in a row (each turn also polls sockets: a loopback answer lands).
QUIET_TURNS = 4
MAX_SETTLE_TURNS = 10_000  # a task that yields forever must not stop time


class FakeClock:
    """A clock that moves only when told to; whoever waits on it wakes as it passes.

    `advance` and `set` move it at once: the waits due by then end at the loop's
    next turn. `run_for`, `run_until` and `drive` move it as a running system lives
    it: from one wait's deadline to the next, letting what woke run (and wait
    again) before time moves on. With real I/O in the loop (a loopback HTTP
    server), `max_step_ms` caps each move, so that an answer still on its way when
    the loop looked quiet is overtaken by one short step at most.
    """

    def __init__(self, now_ms: int = 1_767_225_600_000, *, max_step_ms: int | None = None) -> None:
        self._start_ms = now_ms
        self._us = 0  # microseconds since the start: now_ms and monotonic_s move together
        self._max_step_us = None if max_step_ms is None else max_step_ms * 1000
        self._alarms: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._start_ms + self._us // 1000

    def monotonic_s(self) -> float:
        return self._us / 1_000_000

    def advance(self, ms: int) -> None:
        self._move_to(self._us + round(ms * 1000))

    def set(self, now_ms: int) -> None:
        self._move_to(self._us + round((now_ms - self.now_ms()) * 1000))

    # -- waits -------------------------------------------------------------------------
    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # still a turn of the loop, as asyncio.sleep(0) is
            return
        alarm = self._alarm(seconds)
        try:
            await alarm
        finally:
            alarm.cancel()

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        if timeout_s is None:
            return await awaitable
        waited = asyncio.ensure_future(awaitable)
        alarm = self._alarm(timeout_s)
        try:
            await asyncio.wait((waited, alarm), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            waited.cancel()
            raise
        finally:
            alarm.cancel()
        if waited.done():
            return waited.result()
        waited.cancel()
        await asyncio.wait((waited,))
        raise TimeoutError

    # -- driving -----------------------------------------------------------------------
    async def run_for(self, ms: int) -> None:
        """Let `ms` pass, deadline by deadline."""
        await self.run_until(lambda: False, ms)

    async def run_until(self, done: Callable[[], bool | Awaitable[bool]], within_ms: int) -> bool:
        """Let time pass, deadline by deadline, until `done()`; False if `within_ms`
        passed first. `done` is asked after every move, once the loop is quiet."""
        end_us = self._us + round(within_ms * 1000)
        while True:
            await _until_quiet()
            answer = done()
            if inspect.isawaitable(answer):
                answer = await answer
            if answer:
                return True
            if self._us >= end_us:
                return False
            target = end_us
            deadline = self._next_deadline_us()
            if deadline is not None:
                target = min(target, deadline)
            if self._max_step_us is not None:
                target = min(target, self._us + self._max_step_us)
            self._move_to(target)

    async def drive(self, awaitable: Awaitable[T], within_ms: int = 60_000) -> T:
        """Await `awaitable` while letting time pass; TimeoutError if it takes longer
        than `within_ms` (it is cancelled then)."""
        task = asyncio.ensure_future(awaitable)
        try:
            await asyncio.sleep(0)  # most are done at once, with no time to pass
            finished = task.done() or await self.run_until(task.done, within_ms)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait((task,))
        if not finished:
            raise TimeoutError(f"not done within {within_ms} ms of fake time")
        return task.result()

    # -- inside ---------------------------------------------------------------------------
    def _alarm(self, seconds: float) -> asyncio.Future[None]:
        alarm = asyncio.get_running_loop().create_future()
        if math.isinf(seconds):
            return alarm  # never due
        # Rounded up (but for float noise): a wait never ends early, and a positive one
        # takes at least 1 µs, so that a loop waiting for a sliver of time sees it pass.
        due_us = self._us + (max(1, math.ceil(seconds * 1_000_000 - 1e-3)) if seconds > 0 else 0)
        if due_us <= self._us:
            alarm.set_result(None)
        else:
            heapq.heappush(self._alarms, (due_us, next(self._seq), alarm))
        return alarm

    def _next_deadline_us(self) -> int | None:
        alarms = self._alarms
        while alarms and alarms[0][2].done():  # ended by other means meanwhile
            heapq.heappop(alarms)
        return alarms[0][0] if alarms else None

    def _move_to(self, us: int) -> None:
        self._us = us
        alarms = self._alarms
        while alarms and alarms[0][0] <= us:
            _, _, alarm = heapq.heappop(alarms)
            if not alarm.done():
                alarm.set_result(None)


async def _until_quiet() -> None:
    """Yield until the loop has had nothing else to run for QUIET_TURNS turns."""
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(MAX_SETTLE_TURNS):
        await asyncio.sleep(0)
        # CPython's loop keeps its runnable callbacks in `_ready`; a loop without one
        # is waited on for QUIET_TURNS turns only.
        quiet = 0 if getattr(loop, "_ready", None) else quiet + 1
        if quiet >= QUIET_TURNS:
            return
