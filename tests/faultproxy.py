"""A TCP proxy that injects network faults between clients and one upstream server.

Test tooling for chaos and fault-injection tests, not shipped. The proxy runs an asyncio
server on a daemon thread with its own event loop, so sync tests, async tests and tests
that drive real subprocesses can all put it in front of a store or broker:

    with FaultProxy.from_url(store_url) as proxy:
        client = connect(proxy.url_for(store_url))
        proxy.drop_next_reply()   # the next write reaches the store; its reply is lost

Every control method is thread-safe and has taken effect, on live and new connections,
by the time it returns.

Faults act on chunks: whatever one read from a socket returned (up to 64 KiB). A chunk is
not a protocol message; one message can arrive as several chunks and several messages as
one. `drop_next_reply` and `blackhole_replies` are therefore exact only for
request/response protocols whose client sends a request and waits for its reply before
sending more, as MongoDB drivers do on a pooled connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self, TypeVar, get_args
from urllib.parse import urlsplit, urlunsplit

Mode = Literal["pass", "stall", "refuse", "blackhole_replies", "latency"]
MODES: frozenset[str] = frozenset(get_args(Mode))

READ_SIZE_BYTES = 65_536
QUEUED_CHUNKS_PER_DIRECTION = 64  # then the reader stops and TCP pushes back on the sender
CONNECT_TIMEOUT_S = 5.0
CONTROL_TIMEOUT_S = 5.0

_T = TypeVar("_T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProxyStats:
    bytes_to_server: int
    bytes_to_client: int
    bytes_dropped: int
    connections_accepted: int
    connections_refused: int
    live_connections: int
    resets: int


@dataclass(frozen=True)
class _Chunk:
    read_at: float  # the proxy loop's clock
    data: bytes  # b"" is the sender's EOF


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with an RST rather than a FIN: SO_LINGER 0 makes close() discard and reset."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One accepted client connection and the upstream connection made for it."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.server: asyncio.StreamWriter | None = None
        self.awaiting_reply = False  # a chunk went to the server and none came back since
        self.ending = False
        self.tasks: list[asyncio.Task[None]] = []
        self._close_timer: asyncio.TimerHandle | None = None

    def reset(self) -> None:
        self._end(_reset)

    def close(self) -> None:
        self._end(asyncio.StreamWriter.close)

    def close_after(self, delay_s: float) -> None:
        if self._close_timer is None:
            self._close_timer = asyncio.get_running_loop().call_later(delay_s, self.close)

    def _end(self, end_side: Callable[[asyncio.StreamWriter], None]) -> None:
        if self.ending:
            return
        self.ending = True
        if self._close_timer is not None:
            self._close_timer.cancel()
        for side in (self.client, self.server):
            if side is not None:
                end_side(side)
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()


class FaultProxy:
    """Forwards every connection to one upstream, with faults switched on and off at will.

    Modes (`set_mode`):
    - pass: forward both ways.
    - stall: forward nothing either way, keep every socket open; held bytes go on, in
      order, when the mode changes back.
    - refuse: reset new connections as soon as they are accepted; live ones carry on.
    - blackhole_replies: forward client to server, drop server to client, and close a
      connection `drop_after_s` after its first dropped chunk: the server applied the
      write but the reply was lost.
    - latency: hold each chunk until `latency_ms` after it was read, both ways, in order.
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        *,
        latency_ms: float = 100.0,
        drop_after_s: float = 1.0,
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.listen_host = listen_host
        self._mode: Mode = "pass"
        self._latency_ms = latency_ms
        self._drop_after_s = drop_after_s
        self._replies_to_drop = 0
        self._links: set[_Link] = set()
        self._counts = dict.fromkeys(
            ("to_server", "to_client", "dropped", "accepted", "refused", "resets"), 0
        )
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._mode_changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._startup_error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(listen_port,), name=f"faultproxy-{upstream_port}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(CONTROL_TIMEOUT_S):
            raise TimeoutError(f"the fault proxy did not start in {CONTROL_TIMEOUT_S}s")
        if self._startup_error is not None:
            self._thread.join(CONTROL_TIMEOUT_S)
            raise self._startup_error
        assert self._server is not None
        self.port: int = self._server.sockets[0].getsockname()[1]

    @classmethod
    def from_url(cls, url: str, *, latency_ms: float = 100.0, drop_after_s: float = 1.0) -> Self:
        """A proxy in front of the host:port of a URL such as mongodb://127.0.0.1:27017/."""
        parts = urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"no single host:port in {url!r}")
        return cls(parts.hostname, parts.port, latency_ms=latency_ms, drop_after_s=drop_after_s)

    def url_for(self, url: str) -> str:
        """The same URL with its host:port replaced by the proxy's (user info is kept)."""
        parts = urlsplit(url)
        userinfo, at, _ = parts.netloc.rpartition("@")
        host = f"[{self.listen_host}]" if ":" in self.listen_host else self.listen_host
        return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{host}:{self.port}"))

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    # --- control, from any thread ---------------------------------------------------------

    def set_mode(
        self, mode: Mode, *, latency_ms: float | None = None, drop_after_s: float | None = None
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {sorted(MODES)}")

        def apply() -> None:
            self._mode = mode
            if latency_ms is not None:
                self._latency_ms = latency_ms
            if drop_after_s is not None:
                self._drop_after_s = drop_after_s
            self._wake_waiters()

        self._on_loop(apply)

    def reset_all(self) -> int:
        """Reset (RST) every live connection on both sides; returns how many."""

        def reset() -> int:
            live = [link for link in self._links if not link.ending]
            for link in live:
                link.reset()
            self._counts["resets"] += len(live)
            return len(live)

        return self._on_loop(reset)

    def drop_next_reply(self, n: int = 1) -> None:
        """Swallow the next `n` server chunks that answer a client chunk, resetting each
        connection one was swallowed on: the request reached the server, the client
        never hears back. Adds to any drops still pending. Works per chunk (module doc)."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")

        def arm() -> None:
            self._replies_to_drop += n

        self._on_loop(arm)

    def upstream_ports(self) -> set[int]:
        """The local ports of the live connections to the upstream: what the upstream sees
        as each client's peer port (to find them in `rabbitmqctl list_connections`)."""

        def ports() -> set[int]:
            found: set[int] = set()
            for link in self._links:
                sock = None if link.server is None else link.server.get_extra_info("socket")
                if sock is not None and not link.ending:
                    found.add(sock.getsockname()[1])
            return found

        return self._on_loop(ports)

    def stats(self) -> ProxyStats:
        def snapshot() -> ProxyStats:
            c = self._counts
            return ProxyStats(
                bytes_to_server=c["to_server"],
                bytes_to_client=c["to_client"],
                bytes_dropped=c["dropped"],
                connections_accepted=c["accepted"],
                connections_refused=c["refused"],
                live_connections=sum(not link.ending for link in self._links),
                resets=c["resets"],
            )

        return self._on_loop(snapshot)

    def close(self) -> None:
        """Stop listening, reset every connection, stop the loop and join the thread."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(RuntimeError):  # the loop already ended
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
        if self._thread.is_alive():
            raise TimeoutError(f"the fault proxy thread did not stop in {CONTROL_TIMEOUT_S}s")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _on_loop(self, fn: Callable[[], _T]) -> _T:
        if threading.current_thread() is self._thread:
            return fn()
        if self._closed:
            raise RuntimeError("the fault proxy is closed")

        async def call() -> _T:
            return fn()

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        return future.result(CONTROL_TIMEOUT_S)

    # --- the loop thread -------------------------------------------------------------------

    def _run(self, listen_port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, self.listen_host, listen_port)
            )
        except BaseException as exc:  # handed to the constructor, which raises it
            self._startup_error = exc
            self._loop.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._shutdown())
            self._loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            link.reset()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), CONTROL_TIMEOUT_S)

    def _wake_waiters(self) -> None:
        self._mode_changed.set()
        self._mode_changed = asyncio.Event()

    async def _handle(self, client_in: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        self._counts["accepted"] += 1
        if self._mode == "refuse":
            self._counts["refused"] += 1
            _reset(client)
            return
        link = _Link(client)
        self._links.add(link)
        try:
            await self._relay(link, client_in)
        except Exception:  # a bug here ends the link as a crashed middlebox would
            log.exception(
                "fault proxy link to %s:%d failed", self.upstream_host, self.upstream_port
            )
            link.reset()
        finally:
            self._links.discard(link)
            link.close()

    async def _relay(self, link: _Link, client_in: asyncio.StreamReader) -> None:
        try:
            server_in, server = await asyncio.wait_for(
                asyncio.open_connection(self.upstream_host, self.upstream_port),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError):
            link.reset()  # the client sees what it would have seen without a proxy
            return
        if link.ending:  # reset while the upstream connection was being made
            _reset(server)
            return
        link.server = server
        to_server: asyncio.Queue[_Chunk] = asyncio.Queue(QUEUED_CHUNKS_PER_DIRECTION)
        to_client: asyncio.Queue[_Chunk] = asyncio.Queue(QUEUED_CHUNKS_PER_DIRECTION)
        link.tasks = [
            asyncio.create_task(self._read(link, client_in, to_server)),
            asyncio.create_task(self._read(link, server_in, to_client)),
            asyncio.create_task(self._write(link, to_server, server, to_server=True)),
            asyncio.create_task(self._write(link, to_client, link.client, to_server=False)),
        ]
        await asyncio.wait(link.tasks)

    async def _read(
        self, link: _Link, source: asyncio.StreamReader, queue: asyncio.Queue[_Chunk]
    ) -> None:
        try:
            while True:
                data = await source.read(READ_SIZE_BYTES)
                await queue.put(_Chunk(self._loop.time(), data))
                if not data:
                    return
        except OSError:  # the peer reset: pass the reset on to the other side
            link.reset()

    async def _write(
        self,
        link: _Link,
        queue: asyncio.Queue[_Chunk],
        sink: asyncio.StreamWriter,
        *,
        to_server: bool,
    ) -> None:
        try:
            while True:
                chunk = await queue.get()
                mode = await self._admit(chunk)
                if not chunk.data:
                    if sink.can_write_eof():
                        sink.write_eof()  # half-close, as the sender did
                    return
                if to_server:
                    await self._forward(sink, chunk.data, "to_server")
                    link.awaiting_reply = True
                elif link.awaiting_reply and self._replies_to_drop > 0:
                    self._replies_to_drop -= 1
                    self._counts["dropped"] += len(chunk.data)
                    self._counts["resets"] += 1
                    link.reset()
                    return
                elif mode == "blackhole_replies":
                    self._counts["dropped"] += len(chunk.data)
                    link.close_after(self._drop_after_s)
                else:
                    await self._forward(sink, chunk.data, "to_client")
                    link.awaiting_reply = False
        except OSError:
            link.reset()

    async def _admit(self, chunk: _Chunk) -> Mode:
        """Wait until the current mode lets this chunk go on; returns that mode."""
        while True:
            mode, changed = self._mode, self._mode_changed
            if mode == "stall":
                await changed.wait()
                continue
            if mode == "latency":
                delay_s = chunk.read_at + self._latency_ms / 1000 - self._loop.time()
                if delay_s > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), delay_s)
                    continue
            return mode

    async def _forward(self, sink: asyncio.StreamWriter, data: bytes, counter: str) -> None:
        sink.write(data)
        await sink.drain()
        self._counts[counter] += len(data)
