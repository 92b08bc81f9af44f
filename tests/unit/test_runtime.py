"""Stopping tasks: a task that ignores its cancellation must not hang shutdown."""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest
import uvloop

from timer_service.runtime import cancel_and_wait, loop_factory, run_until_signal, wait_event


async def test_cancelled_tasks_are_awaited() -> None:
    ended: list[str] = []

    async def worker(name: str) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.append(name)

    tasks = [asyncio.create_task(worker(n)) for n in "abc"]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks, 1.0, "test")
    assert sorted(ended) == ["a", "b", "c"]
    assert all(t.cancelled() for t in tasks)


async def test_a_task_that_swallows_cancellation_is_left_behind_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                continue  # like a driver that waits for a reply it already asked for

    task = asyncio.create_task(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="timer_service.runtime"):
        await cancel_and_wait([task], 0.2, "test")
    assert 0.2 <= time.monotonic() - started < 1.0
    assert not task.done()
    (left,) = [r for r in caplog.records if getattr(r, "task", None) == "stubborn"]
    # Where it waits, coroutine by coroutine, down to the future at the bottom.
    awaiting = left.awaiting  # type: ignore[attr-defined]
    assert "stubborn" in awaiting[0] and "sleep" in awaiting[1], awaiting
    release.set()
    task.cancel()
    await asyncio.wait([task], timeout=1)
    assert task.done()


async def test_a_failure_on_the_way_out_is_not_raised() -> None:
    async def failing() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    await cancel_and_wait([task], 1.0, "test")
    assert isinstance(task.exception(), RuntimeError)


async def test_a_wait_for_an_event_ends_on_a_cancel_that_comes_with_the_event() -> None:
    # Python 3.11's asyncio.wait_for returned the event's result when the cancel and
    # the event came in the same turn: the daemon's stats loop swallowed its shutdown
    # cancel that way and ran on (seen in CI: "daemon-stats ... left behind").
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(event, 60))
    await asyncio.sleep(0)
    event.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_cancel_that_a_library_call_dropped_ends_the_next_wait() -> None:
    # On Python 3.11 a library call can drop a cancel: PyMongo's network layer awaits
    # `asyncio.wait_for(conn.write(...))`, which returns the write's result when the
    # cancel comes in the same turn. The task still says it is being cancelled; the
    # loop's next wait must end on it, not sleep on (CI: "daemon-stats ... left
    # behind", asleep in wait_event after its cancel).
    dropped = asyncio.Event()
    event = asyncio.Event()

    async def library_call() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            dropped.set()  # and returns as if the reply had come

    async def loop() -> None:
        while True:
            await library_call()
            await wait_event(event, 60)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2)
    assert dropped.is_set()
    assert done and task.cancelled(), "the loop slept on after its cancel was dropped"


async def test_a_wait_for_an_event_says_whether_it_came() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 60) is True


@pytest.mark.parametrize("choice", ["asyncio", "uvloop", "auto"])
def test_a_process_runs_on_the_event_loop_chosen(choice: str) -> None:
    """uvloop where chosen (and by `auto` on Linux, where it is installed); asyncio's own
    loop keeps working when chosen, or where uvloop is not there."""
    seen: list[type] = []

    async def main(stop: asyncio.Event) -> None:
        seen.append(type(asyncio.get_running_loop()))

    assert run_until_signal(main, choice) == 0
    on_uvloop = choice == "uvloop" or (choice == "auto" and sys.platform.startswith("linux"))
    assert (seen[0] is uvloop.Loop) == on_uvloop, (choice, seen)


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(ImportError):
        loop_factory("uvloop")
