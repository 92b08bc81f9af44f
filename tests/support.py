"""Starting the real outside systems for tests: a SecantusDB server and RabbitMQ names."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

AMQP_URL = os.environ.get("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
VENV_BIN = Path(sys.executable).parent


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_EPHEMERAL_LOW = _ephemeral_low()
_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port for a process a test starts, below the kernel's ephemeral range.

    A port from bind(0) is an ephemeral one, which the kernel may give to the next bind(0)
    anywhere, such as the embedded store `dev` starts, before our process has bound it.
    Ports below the range are only ever handed out here, each once per test run.
    """
    low = max(1024, _EPHEMERAL_LOW - 12000)
    for _ in range(1000):
        port = random.randrange(low, _EPHEMERAL_LOW)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in [{low}, {_EPHEMERAL_LOW})")


def wait_port(port: int, timeout_s: float = 30.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


class Progress:
    """Live progress lines of a long test: its phases, counts and elapsed time.

    pytest captures fd 1 and 2 while a test runs, so a print shows only after the test
    (and not at all with -q unless it fails). These lines go through pytest's terminal
    reporter with capture suspended, as live logging does: they appear as they happen,
    with -q too. One line per phase; `tick` is for loops and speaks every `every_s`.
    """

    def __init__(self, label: str, config: Any = None, every_s: float = 10.0) -> None:
        self.label = label
        self.every_s = every_s
        self.started = time.monotonic()
        self._config = config
        self._last_line = self.started

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        self._last_line = time.monotonic()
        self._write(f"[{self.label} +{self.elapsed_s:.1f}s] {message}")

    def tick(self, message: Callable[[], str] | str) -> None:
        """Report `message` (called if callable) if nothing was said for `every_s`."""
        if time.monotonic() - self._last_line >= self.every_s:
            self(message() if callable(message) else message)

    def _write(self, line: str) -> None:
        plugins = getattr(self._config, "pluginmanager", None)
        reporter = plugins.get_plugin("terminalreporter") if plugins else None
        if reporter is None:  # outside pytest, or -p no:terminal
            print(line, file=sys.__stderr__, flush=True)
            return
        capture = plugins.get_plugin("capturemanager") if plugins else None
        suspended = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
        with suspended:
            reporter.write_line(line)
            reporter.flush()


async def poll_until(
    check: Callable[[], Awaitable[bool]],
    what: Callable[[], str] | str,
    timeout_s: float,
    interval_s: float = 0.2,
) -> float:
    """Await `check()` until it is true; fail after `timeout_s` saying `what` was awaited
    and what was seen (`what` is called for the message when callable). Returns the wait."""
    started = time.monotonic()
    deadline = started + timeout_s
    while not await check():
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"after {timeout_s:g} s still waiting for {said}")
        await asyncio.sleep(interval_s)
    return time.monotonic() - started


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class SecantusServer:
    """A `secantusd-py` subprocess on a free port; restartable on the same data dir."""

    def __init__(self, data_dir: str | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="secantus-")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> None:
        exe = shutil.which("secantusd-py", path=str(VENV_BIN)) or "secantusd-py"
        self.proc = subprocess.Popen(
            [
                exe,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--storage-path",
                self.data_dir,
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.port, 60)

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


@contextlib.contextmanager
def secantus_server() -> Iterator[SecantusServer]:
    server = SecantusServer()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


async def drop_topology(prefix: str, url: str = AMQP_URL) -> None:
    """Delete the exchange and every queue a test created under `prefix`."""
    import aio_pika

    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        names = _queues_with_prefix(prefix + ".")
        for name in names:
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{prefix}.dispatch")


def drop_topology_sync(prefix: str) -> None:
    import asyncio
    import threading

    error: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(drop_topology(prefix))
        except BaseException as exc:  # reported, never fatal to a teardown
            error.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if error:
        print(f"could not drop RabbitMQ topology {prefix!r}: {error[0]!r}")


def _queues_with_prefix(prefix: str) -> list[str]:
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "name"], capture_output=True, text=True, timeout=60
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip().startswith(prefix)]


def rabbitmqctl(*args: str, timeout_s: float = 60) -> str:
    done = subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@contextlib.contextmanager
def own_vhost(prefix: str = "t", url: str = AMQP_URL) -> Iterator[str]:
    """A RabbitMQ vhost of the caller's own on the machine's broker, for tests that break
    things: yields `url` pointed at it. Deleting it at the end takes every queue, exchange
    and connection in it along, and nothing outside it is touched."""
    vhost = unique_name(prefix)
    user = urlsplit(url).username or "guest"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield urlunsplit(urlsplit(url)._replace(path="/" + quote(vhost, safe="")))
    finally:
        rabbitmqctl("delete_vhost", vhost)
