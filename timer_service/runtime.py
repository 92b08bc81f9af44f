"""Running a process until SIGTERM/SIGINT, then shutting it down cleanly (exit 0)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from timer_service.clock import Clock
from timer_service.errors import LayoutMismatch

log = logging.getLogger(__name__)


LAYOUT_MISMATCH_EXIT = 3


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop to run on: uvloop (`auto`: where it is installed, on Linux) or
    asyncio's own (None: asyncio's default). uvloop spends less CPU per fired job
    (bench/README.md, "event loop"); the default loop stays fully supported."""
    if choice == "asyncio" or (choice == "auto" and not sys.platform.startswith("linux")):
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run_until_signal(
    main: Callable[[asyncio.Event], Awaitable[None]], event_loop: str = "auto"
) -> int:
    """Run `main(stop)`; SIGTERM/SIGINT set `stop`, and `main` returns after cleanup."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        await main(stop)

    try:
        with asyncio.Runner(loop_factory=loop_factory(event_loop)) as loop_runner:
            loop_runner.run(runner())
    except KeyboardInterrupt:
        pass
    except LayoutMismatch as exc:
        # A configuration error: one line that says what to change, and a failed exit.
        print(f"timer-service: refusing to start: {exc}", file=sys.stderr, flush=True)
        return LAYOUT_MISMATCH_EXIT
    return 0


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]],
    timeout_s: float,
    owner: str,
    clock: Clock | None = None,
) -> None:
    """Cancel `tasks` and wait for them, at most `timeout_s` (on `clock`, when given).

    A task that swallows its cancellation or waits on a peer that never answers (a
    driver awaiting a reply on a dead connection, say) is logged and left behind, so
    that shutdown goes on: closing the clients afterwards ends such tasks.
    """
    tasks = [t for t in tasks if not t.done()]
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    if clock is None:
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    else:
        with contextlib.suppress(TimeoutError):
            await clock.wait_for(asyncio.wait(tasks), timeout_s)
        pending = {task for task in tasks if not task.done()}
    for task in pending:
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        where = await_chain(task) if isinstance(task, asyncio.Task) else []
        log.warning(
            "task did not stop in time; left behind",
            extra={"owner": owner, "task": name, "waited_s": timeout_s, "awaiting": where},
        )
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a failure on the way out is not news


def raise_if_cancelling() -> None:
    """Raise `CancelledError` in a task that was cancelled and runs on: a library call
    dropped the cancel. On Python 3.11 `asyncio.wait_for` returns its result when the
    cancel comes in the same turn, and PyMongo's network layer awaits one per write
    (seen in CI: the daemon's stats loop, cancelled in its job count, slept on). The
    task still counts the cancel (`Task.cancelling`), so a loop that looks before it
    sleeps ends where it would have."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for `event` at most `timeout_s`; whether it was set. Ends at once in a task
    whose cancel a library call dropped (`raise_if_cancelling`).

    Not `asyncio.wait_for`: on Python 3.11 it returns the event's result when a cancel
    arrives in the same turn as the event, and the cancelled loop runs on.
    """
    raise_if_cancelling()
    try:
        async with asyncio.timeout(timeout_s):
            return await event.wait()
    except TimeoutError:
        return False


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where a suspended task waits, outermost first: each coroutine it awaits, down to
    the future at the bottom (`Task.get_stack` shows only the outermost frame)."""
    chain: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is None:
            if not hasattr(awaited, "cr_await") and not hasattr(awaited, "gi_yieldfrom"):
                chain.append(repr(awaited)[:200])  # the future it waits on
            break
        code = frame.f_code
        chain.append(f"{code.co_filename}:{frame.f_lineno} {code.co_qualname}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return chain


def freeze_startup_heap() -> None:
    """Call once startup is done: collect, then move every object alive now (modules,
    clients, settings) out of the collector's reach, and collect less often.

    A full collection stops the event loop, and with it every send due meanwhile:
    52-93 ms three times per 20 s at 500 jobs/s with the defaults. Frozen, a full
    collection scans only what the running service allocates; with young collections
    every 10,000 net allocations (not 700) and full ones 10x rarer, the delivery
    lateness p99 at 500 jobs/s went from 20.8 ms to 4.5 ms (bench/lateness_bench.py).
    Almost everything the service frees goes by reference counting, not the collector.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 100)


def dump_tasks() -> None:
    """SIGUSR1: print every asyncio task's stack to stderr, to see where a process waits."""
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    out.write(f"--- {len(tasks)} asyncio tasks\n")
    for task in tasks:
        task.print_stack(limit=12, file=out)
    sys.stderr.write(out.getvalue())
    sys.stderr.flush()
