"""One lifecycle for every process: parts start in order, a dependency is retried on
the clock with a JSON-able log line per failure until it answers or the process is
told to stop, and what started stops in reverse order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from timer_service.clock import FakeClock
from timer_service.errors import LayoutMismatch
from timer_service.processes.lifecycle import Lifecycle


class Part:
    def __init__(self, name: str, journal: list[str], failures: int = 0) -> None:
        self.name, self.journal, self.failures = name, journal, failures

    async def start(self) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError(f"{self.name} is down")
        self.journal.append(f"start {self.name}")

    async def stop(self) -> None:
        self.journal.append(f"stop {self.name}")


async def test_parts_start_in_order_and_stop_in_reverse(fake_clock: FakeClock) -> None:
    journal: list[str] = []
    life = Lifecycle("test", fake_clock, grace_s=1)
    for name in ("ops", "store", "daemon"):
        part = Part(name, journal)
        life.add(name, part.start, part.stop)
    stop = asyncio.Event()

    async def serve() -> None:
        journal.append("serve")

    await life.run(stop, serve)
    assert journal == [
        "start ops", "start store", "start daemon", "serve",
        "stop daemon", "stop store", "stop ops",
    ]  # fmt: skip


async def test_a_dependency_is_retried_on_the_clock_with_a_log_line_per_failure(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    journal: list[str] = []
    store = Part("store", journal, failures=3)
    life = Lifecycle("test", fake_clock, grace_s=1)
    life.dependency("store", store.start, store.stop)
    stop = asyncio.Event()

    async def serve() -> None:
        journal.append("serve")

    with caplog.at_level(logging.WARNING, logger="timer_service.processes.lifecycle"):
        run = asyncio.ensure_future(life.run(stop, serve))
        await fake_clock.run_until(run.done, within_ms=10_000)  # no real time passes
    await run
    retries = [r for r in caplog.records if r.getMessage() == "store not ready, retrying"]
    assert [(r.attempt, r.retry_in_s) for r in retries] == [(1, 0.2), (2, 0.4), (3, 0.8)]  # type: ignore[attr-defined]
    assert "store is down" in retries[0].error  # type: ignore[attr-defined]
    assert journal == ["start store", "serve", "stop store"]


async def test_a_stop_while_a_dependency_is_down_ends_the_wait_and_starts_nothing_more(
    fake_clock: FakeClock,
) -> None:
    journal: list[str] = []
    ops, store, daemon = (Part("ops", journal), Part("store", journal, 10**6), Part("d", journal))
    life = Lifecycle("test", fake_clock, grace_s=1)
    life.add("ops", ops.start, ops.stop)
    life.dependency("store", store.start, store.stop)
    life.add("daemon", daemon.start, daemon.stop)
    stop = asyncio.Event()
    run = asyncio.ensure_future(life.run(stop, None))
    await fake_clock.run_for(3_000)
    stop.set()
    await asyncio.wait_for(run, 1)  # at once, though the retry's wait was on the clock
    assert journal == ["start ops", "stop ops"]


async def test_a_stop_ends_a_start_attempt_that_hangs(fake_clock: FakeClock) -> None:
    hung = asyncio.Event()

    async def hangs() -> None:
        hung.set()
        await asyncio.Event().wait()

    life = Lifecycle("test", fake_clock, grace_s=1)
    life.dependency("store", hangs)
    stop = asyncio.Event()
    run = asyncio.ensure_future(life.run(stop, None))
    await hung.wait()
    stop.set()
    await asyncio.wait_for(run, 1)


async def test_a_layout_mismatch_is_not_retried(fake_clock: FakeClock) -> None:
    async def mismatched() -> None:
        raise LayoutMismatch("TIMER_PARTITIONS=8, the store has 16")

    life = Lifecycle("test", fake_clock, grace_s=1)
    life.dependency("store", mismatched)
    with pytest.raises(LayoutMismatch):
        await life.run(asyncio.Event(), None)


async def test_a_part_that_does_not_stop_within_the_grace_is_left_and_the_rest_stop(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    journal: list[str] = []
    store = Part("store", journal)

    async def never_stops() -> None:
        await asyncio.Event().wait()

    life = Lifecycle("test", fake_clock, grace_s=2)
    life.add("store", store.start, store.stop)
    life.add("broker", None, never_stops)

    async def served() -> None:
        pass

    with caplog.at_level(logging.WARNING, logger="timer_service.processes.lifecycle"):
        run = asyncio.ensure_future(life.run(asyncio.Event(), served))
        await fake_clock.run_until(run.done, within_ms=60_000)
    await run
    assert journal == ["start store", "stop store"]
    assert any(r.getMessage() == "broker did not stop in time; going on" for r in caplog.records)
