"""Operator signals on the real processes: SIGUSR1 dumps the asyncio tasks and the
process goes on serving; SIGTERM then still ends it cleanly and quickly."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx

from tests.e2e.conftest import Stack


async def test_sigusr1_dumps_tasks_and_the_process_goes_on(stack: Stack) -> None:
    for name, service in stack.services.items():
        assert service.proc is not None
        service.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "asyncio tasks" not in service.log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"{name} printed no task dump:\n{service.tail()}"
            await asyncio.sleep(0.1)
        assert service.proc.poll() is None, f"{name} exited on SIGUSR1:\n{service.tail()}"
        async with httpx.AsyncClient(timeout=5) as client:
            r = await client.get(f"http://127.0.0.1:{service.port}/healthz")
        assert r.status_code == 200, f"{name} after SIGUSR1: {r.status_code}"


async def test_sigterm_ends_every_process_with_0_within_the_grace(stack: Stack) -> None:
    # TIMER_SHUTDOWN_GRACE_S is 5 here; nothing is in flight, so well under it.
    for name, service in list(stack.services.items()):
        started = time.monotonic()
        code = await asyncio.to_thread(service.terminate, 15)
        took = time.monotonic() - started
        assert code == 0, f"{name} exited {code}:\n{service.tail()}"
        assert took < 8, f"{name} took {took:.1f} s to stop:\n{service.tail()}"
        assert "did not stop in time" not in service.log_path.read_text(errors="replace"), (
            f"{name} left a task behind:\n{service.tail()}"
        )
