"""One startup and shutdown for every process (`api`, `daemon`, `broker`, `dev`).

Parts start in the order they were added. A dependency (the store, the queue) may
come up after us: its start is retried, with a JSON log line per failure, until it
answers or the process is told to stop, and a stop (SIGTERM) ends the wait at once,
even inside an attempt that hangs. Then the process runs until told to stop, and
whatever started is stopped in reverse order, within TIMER_SHUTDOWN_GRACE_S (plus a
margin to close the clients after the in-flight work had its grace).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.errors import LayoutMismatch

log = logging.getLogger(__name__)

Action = Callable[[], Awaitable[None]]

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
CLOSE_MARGIN_S = 5.0  # beyond the grace: closing clients once in-flight work is done


async def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Part:
    name: str
    start: Action
    stop: Action
    retried: bool


class Lifecycle:
    def __init__(self, process: str, clock: Clock, grace_s: float) -> None:
        self.process = process
        self._clock = clock
        self._grace_s = grace_s
        self._parts: list[Part] = []

    def add(self, name: str, start: Action | None = None, stop: Action | None = None) -> None:
        """A part that starts once (a server, a component); a failure ends the start."""
        self._parts.append(Part(name, start or _nothing, stop or _nothing, retried=False))

    def dependency(self, name: str, start: Action, stop: Action | None = None) -> None:
        """A part outside this process (store, queue): its start is retried until it
        answers; a LayoutMismatch is a configuration error and is not retried."""
        self._parts.append(Part(name, start, stop or _nothing, retried=True))

    async def run(self, stop: asyncio.Event, serve: Callable[[], Awaitable[None]] | None) -> None:
        """Start every part, then `serve()` (or wait for `stop`), then stop what started."""
        started: list[Part] = []
        try:
            for part in self._parts:
                if not await self._start(part, stop):
                    return  # told to stop while starting
                started.append(part)
            await (serve() if serve is not None else stop.wait())
            log.info(f"{self.process} stopping")
        finally:
            await self._stop(started)

    async def _start(self, part: Part, stop: asyncio.Event) -> bool:
        delay_s = RETRY_FIRST_S
        attempt = 1
        while not stop.is_set():
            try:
                return await self._unless_stopped(part.start, stop)
            except LayoutMismatch:
                raise
            except Exception as exc:
                if not part.retried:
                    raise
                log.warning(
                    f"{part.name} not ready, retrying",
                    extra={
                        "service": self.process,
                        "dependency": part.name,
                        "attempt": attempt,
                        "retry_in_s": delay_s,
                        "error": repr(exc),
                    },
                )
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(stop.wait(), delay_s)
            delay_s = min(RETRY_MAX_S, delay_s * 2)
            attempt += 1
        return False

    async def _unless_stopped(self, start: Action, stop: asyncio.Event) -> bool:
        """Run `start`; True once it has, False if `stop` came first (it is cancelled)."""
        starting = asyncio.ensure_future(start())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if starting.done():
            starting.result()  # raises what the start raised
            return True
        starting.cancel()
        with contextlib.suppress(TimeoutError):
            await self._clock.wait_for(asyncio.wait((starting,)), TASK_STOP_TIMEOUT_S)
        if starting.done() and not starting.cancelled():
            starting.exception()  # retrieved: a failure on the way out is not news
        return False

    async def _stop(self, started: list[Part]) -> None:
        deadline_s = self._clock.monotonic_s() + self._grace_s + CLOSE_MARGIN_S
        for part in reversed(started):
            left_s = max(TASK_STOP_TIMEOUT_S, deadline_s - self._clock.monotonic_s())
            try:
                await self._clock.wait_for(part.stop(), left_s)
            except TimeoutError:
                log.warning(
                    f"{part.name} did not stop in time; going on",
                    extra={"service": self.process, "waited_s": round(left_s, 1)},
                )
            except Exception as exc:
                log.warning(
                    f"{part.name} failed to stop",
                    extra={"service": self.process, "error": repr(exc)},
                )
        log.info(f"{self.process} stopped")
