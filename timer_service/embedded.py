"""The embedded MongoDB-protocol store `dev` uses when no TIMER_MONGO_URL is set:
a SecantusDB server (`secantusd-py`) as a child process on a local data directory.

A child process rather than an in-process server, so the store runs on the
other core instead of competing with the service for one interpreter lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
SUPERVISE_EVERY_S = 0.5
RESTART_TIMEOUT_S = 60.0


class EmbeddedStoreMissing(RuntimeError):
    """The embedded store is not installed."""


class _ExitedEarly(RuntimeError):
    """The store process ended before it listened."""


def _die_with_parent() -> None:
    # Linux only: the store must not outlive a `dev` that was killed with -9,
    # or it would keep the data directory locked.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stores_on(data_dir: Path) -> list[int]:
    """Store processes serving `data_dir` (Linux /proc; elsewhere none are found)."""
    wanted = str(data_dir).encode()
    found = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if any(b"secantusd" in a for a in args[:2]) and wanted in args:
                found.append(int(entry.name))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedStore:
    """The child store process, started in a session of its own (a terminal's Ctrl-C
    reaches `dev`, which stops the store last) and restarted on its port if it dies."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.restarts = 0
        self._exe = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    async def start(self, timeout_s: float = 60.0, attempts: int = 3) -> None:
        exe = shutil.which("secantusd-py", path=str(Path(sys.executable).parent)) or shutil.which(
            "secantusd-py"
        )
        if exe is None:
            # The distribution is callback-timer-service, installed from its checkout
            # (README.md); `timer-service` on PyPI is an unrelated project.
            raise EmbeddedStoreMissing(
                "the embedded store needs SecantusDB, the `embedded` extra of"
                " callback-timer-service: pip install -e '.[embedded]' in the service's"
                " checkout (not `pip install timer-service`: that is an unrelated project),"
                " or point TIMER_MONGO_URL at a MongoDB"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self._wait_for_previous(timeout_s)
        # The port is picked before the child binds it, so another process can take it in
        # between; the child then exits at once and a fresh port is tried.
        self._exe = exe
        for attempt in range(1, attempts + 1):
            self.port = _free_port()
            try:
                await self._spawn(exe, timeout_s)
                self._supervisor = asyncio.create_task(self._supervise(), name="store-watch")
                return
            except _ExitedEarly as exc:
                if attempt == attempts:
                    raise RuntimeError(str(exc)) from None
                log.warning("embedded store exited at start; retrying", extra={"port": self.port})

    async def _wait_for_previous(self, timeout_s: float) -> None:
        """A `dev` killed with -9 leaves its store closing the data directory (it gets
        SIGTERM when its parent dies); a new store there meets WiredTiger's lock and
        exits. So wait until no store serves this directory, at most `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pids = _stores_on(self.data_dir)
        if pids:
            log.warning(
                "waiting for the previous embedded store to let go of its data",
                extra={"pids": pids, "data_dir": str(self.data_dir)},
            )
        while pids and loop.time() < deadline:
            await asyncio.sleep(0.1)
            pids = _stores_on(self.data_dir)
        if pids:
            raise RuntimeError(
                f"the data directory {self.data_dir} is still in use by store process "
                f"{', '.join(map(str, pids))} (another `dev`?); stop it, or set "
                "TIMER_DATA_DIR to another directory"
            )

    async def _spawn(self, exe: str, timeout_s: float) -> None:
        # Startup happens once, before serving: blocking here costs nothing.
        log_file = open(self.data_dir.parent / "store.log", "ab")  # noqa: ASYNC230
        self._proc = proc = subprocess.Popen(  # noqa: ASYNC220
            [
                exe,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--storage-path",
                str(self.data_dir),
                "--log-level",
                "WARNING",
            ],
            stdout=log_file,
            stderr=log_file,
            preexec_fn=_die_with_parent,
            # Its own session: the terminal's SIGINT goes to `dev` alone, which then
            # stops the store after the service (it must not die first).
            start_new_session=True,
        )
        log_file.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if proc.poll() is not None:
                self._proc = None
                raise _ExitedEarly(
                    f"the embedded store exited with {proc.returncode}; "
                    f"see {self.data_dir.parent / 'store.log'}"
                )
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            log.info("embedded store ready", extra={"data_dir": str(self.data_dir)})
            return
        raise TimeoutError(f"the embedded store did not listen within {timeout_s}s")

    async def _supervise(self) -> None:
        """Restart the store on the same port (the clients' URL) whenever it exits."""
        while True:
            await asyncio.sleep(SUPERVISE_EVERY_S)
            proc = self._proc
            if proc is None or proc.poll() is None:
                continue
            log.error(
                "embedded store exited; restarting it",
                extra={"returncode": proc.returncode, "port": self.port},
            )
            self._proc = None
            try:
                await self._spawn(self._exe, RESTART_TIMEOUT_S)
                self.restarts += 1
                log.info("embedded store restarted", extra={"port": self.port})
            except Exception as exc:  # try again on the next round
                log.error("embedded store did not restart", extra={"error": repr(exc)})

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self._proc.wait, 30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            await asyncio.to_thread(self._proc.wait, 10)
        self._proc = None
