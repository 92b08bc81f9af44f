"""Pieces several benchmarks share: a store of either kind, a helper server process,
another process's CPU time."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import SecantusServer  # noqa: E402


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rabbitmq_pid() -> int | None:
    """The local RabbitMQ server's process (its Erlang VM), or None when not found."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().split(" ", 2)[1] == "(beam.smp)":
                return int(stat.parent.name)
        except OSError:
            continue
    return None


async def make_store(kind: str, secantus: SecantusServer | None) -> Any:
    """A set-up job store: "memory", or a fresh database on `secantus`."""
    if kind == "memory":
        from timer_service.store.memory import MemoryStore

        store: Any = MemoryStore(buckets=60)
    else:
        from timer_service.store.mongo import MongoStore

        assert secantus is not None
        store = MongoStore(
            secantus.url, f"bench{uuid.uuid4().hex[:8]}", buckets=60, retention_ms=86_400_000
        )
    await store.setup()
    return store


def start_server_process(script: str) -> tuple[subprocess.Popen[bytes], int]:
    """Run `python <script> serve --port N` on a free port; return once it accepts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([sys.executable, script, "serve", "--port", str(port)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{script} did not start serving")


def serve_protocol(factory: Callable[[], asyncio.Protocol], port: int) -> None:
    """Serve `factory`'s protocol on 127.0.0.1:`port` until killed."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(factory, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class GcPauses:
    """Durations of the full (generation 2) collections while installed: each one
    stops this process's event loop, daemon and broker alike."""

    def __init__(self) -> None:
        self.pauses_ms: list[float] = []
        self._started = 0.0

    def install(self) -> None:
        gc.callbacks.append(self._note)

    def remove(self) -> None:
        if self._note in gc.callbacks:
            gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses_ms.append((time.perf_counter() - self._started) * 1000)
