"""The fault proxy against a loopback echo server: each fault as a client sees it."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.faultproxy import FaultProxy

WAIT_S = 2.0
QUIET_S = 0.2  # how long "nothing arrives" is watched for


class EchoServer(socketserver.ThreadingTCPServer):
    """Echoes every connection back and records all it was sent, for the upstream's view."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EchoHandler)
        self.port: int = self.server_address[1]
        self.received = bytearray()
        self.connections = 0
        self.peer_ports: set[int] = set()  # of the connections open now
        self.changed = threading.Condition()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def record(self, data: bytes) -> None:
        with self.changed:
            self.received += data
            self.changed.notify_all()

    def wait_received(self, expected: bytes) -> None:
        with self.changed:
            arrived = self.changed.wait_for(lambda: bytes(self.received) == expected, WAIT_S)
        assert arrived, f"upstream expected {expected!r}, received {bytes(self.received)!r}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(WAIT_S)


class EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        with self.server.changed:
            self.server.connections += 1
            self.server.peer_ports.add(self.client_address[1])
        try:
            while data := self.request.recv(65_536):
                self.server.record(data)
                self.request.sendall(data)
        except OSError:
            pass  # the proxy reset us; that is what these tests do
        finally:
            with self.server.changed:
                self.server.peer_ports.discard(self.client_address[1])


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo.port) as proxy:
        yield proxy


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=WAIT_S)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    deadline = time.monotonic() + WAIT_S
    data = b""
    while len(data) < size:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        part = sock.recv(size - len(data))
        assert part, f"expected {size} bytes, the connection ended after {data!r}"
        data += part
    return data


def read_to_end(sock: socket.socket) -> tuple[bytes, str]:
    """Everything until the connection ends, and how it ended: "eof" or "reset"."""
    sock.settimeout(WAIT_S)
    data = b""
    try:
        while part := sock.recv(65_536):
            data += part
    except ConnectionResetError:
        return data, "reset"
    return data, "eof"


def ending_of_a_new_connection(proxy: FaultProxy) -> tuple[bytes, str]:
    """As `read_to_end`; a reset can come before connect() has even returned."""
    try:
        client = connect(proxy)
    except ConnectionResetError:
        return b"", "reset"
    with client:
        return read_to_end(client)


def assert_quiet(sock: socket.socket) -> None:
    sock.settimeout(QUIET_S)
    with pytest.raises(TimeoutError):
        got = sock.recv(65_536)
        pytest.fail(f"expected nothing for {QUIET_S}s, got {got!r}")


def roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return recv_exactly(sock, len(data))


def poll(condition_met: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition_met():
        assert time.monotonic() < deadline, f"still waiting for {what} after {WAIT_S}s"
        time.sleep(0.01)


def test_pass_forwards_both_ways_and_passes_the_half_close_on(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    payload = bytes(range(256)) * 1024  # 256 KiB: several chunks and some back-pressure
    with connect(proxy) as client:

        def send_then_half_close() -> None:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send_then_half_close)
        sender.start()
        echoed, ending = read_to_end(client)
        sender.join(WAIT_S)
    assert (len(echoed), ending) == (len(payload), "eof")
    assert echoed == payload
    poll(lambda: proxy.stats().live_connections == 0, "the link to close")
    stats = proxy.stats()
    assert (stats.bytes_to_server, stats.bytes_to_client) == (len(payload), len(payload))
    assert (stats.connections_accepted, stats.resets, stats.bytes_dropped) == (1, 0, 0)


def test_reset_all_resets_every_live_connection(proxy: FaultProxy) -> None:
    with connect(proxy) as first, connect(proxy) as second:
        assert roundtrip(first, b"one") == b"one"
        assert roundtrip(second, b"two") == b"two"
        assert proxy.reset_all() == 2
        assert read_to_end(first) == (b"", "reset")
        assert read_to_end(second) == (b"", "reset")
    stats = proxy.stats()
    assert (stats.resets, stats.live_connections) == (2, 0)
    with connect(proxy) as again:
        assert roundtrip(again, b"still serving") == b"still serving"


def test_upstream_ports_are_the_peer_ports_the_upstream_sees(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    assert proxy.upstream_ports() == set()
    with connect(proxy) as first, connect(proxy) as second:
        assert roundtrip(first, b"one") == b"one"
        assert roundtrip(second, b"two") == b"two"
        seen, ports = set(echo.peer_ports), proxy.upstream_ports()
        assert len(ports) == 2 and ports == seen, f"expected {seen}, got {ports}"
        proxy.reset_all()
        assert proxy.upstream_ports() == set(), "ended links are not listed"


def test_stall_holds_bytes_both_ways_and_releases_them_in_order(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as client:
        assert roundtrip(client, b"warm.") == b"warm."
        proxy.set_mode("stall")
        for part in (b"one.", b"two.", b"three."):
            client.sendall(part)
        assert_quiet(client)
        assert bytes(echo.received) == b"warm.", "a stalled request reached the upstream"
        proxy.set_mode("pass")
        assert recv_exactly(client, len(b"one.two.three.")) == b"one.two.three."
        echo.wait_received(b"warm.one.two.three.")
    assert proxy.stats().resets == 0


def test_stall_also_holds_replies_already_on_their_way(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as client:
        proxy.set_mode("latency", latency_ms=300)
        client.sendall(b"ping")
        echo.wait_received(b"ping")
        proxy.set_mode("stall")  # the echo is held in the proxy by now
        assert_quiet(client)
        proxy.set_mode("pass")
        assert recv_exactly(client, 4) == b"ping"


def test_refuse_resets_new_connections_while_live_ones_carry_on(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as live:
        assert roundtrip(live, b"before") == b"before"
        proxy.set_mode("refuse")
        assert ending_of_a_new_connection(proxy) == (b"", "reset")
        assert roundtrip(live, b"during") == b"during"
        proxy.set_mode("pass")
        with connect(proxy) as after:
            assert roundtrip(after, b"after") == b"after"
    stats = proxy.stats()
    assert (stats.connections_accepted, stats.connections_refused) == (3, 1)
    assert echo.connections == 2, "a refused connection reached the upstream"


def test_blackhole_replies_delivers_the_request_and_the_client_gets_only_eof(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    drop_after_s = 0.3
    proxy.set_mode("blackhole_replies", drop_after_s=drop_after_s)
    with connect(proxy) as client:
        sent_at = time.monotonic()
        client.sendall(b"insert")
        echo.wait_received(b"insert")
        assert read_to_end(client) == (b"", "eof")
        waited_s = time.monotonic() - sent_at
    assert waited_s >= drop_after_s
    stats = proxy.stats()
    assert (stats.bytes_to_server, stats.bytes_to_client, stats.bytes_dropped) == (6, 0, 6)


def test_drop_next_reply_resets_after_the_request_reached_the_upstream(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    with connect(proxy) as client:
        assert roundtrip(client, b"warm.") == b"warm."
        proxy.drop_next_reply()
        client.sendall(b"write")
        echo.wait_received(b"warm.write")
        assert read_to_end(client) == (b"", "reset")
    stats = proxy.stats()
    assert (stats.resets, stats.bytes_dropped) == (1, len(b"write"))
    with connect(proxy) as next_client:
        assert roundtrip(next_client, b"only one was dropped") == b"only one was dropped"


def test_drop_next_reply_counts_replies_across_connections(proxy: FaultProxy) -> None:
    proxy.drop_next_reply(2)
    for _ in range(2):
        with connect(proxy) as client:
            client.sendall(b"lost")
            assert read_to_end(client) == (b"", "reset")
    with connect(proxy) as client:
        assert roundtrip(client, b"kept") == b"kept"
    assert proxy.stats().resets == 2


def test_latency_delays_each_direction_and_keeps_order(proxy: FaultProxy) -> None:
    latency_s = 0.1
    proxy.set_mode("latency", latency_ms=latency_s * 1000)
    with connect(proxy) as client:
        started = time.monotonic()
        assert roundtrip(client, b"ping") == b"ping"
        assert time.monotonic() - started >= 2 * latency_s
        parts = [f"{i}.".encode() for i in range(20)]
        for part in parts:
            client.sendall(part)
        assert recv_exactly(client, len(b"".join(parts))) == b"".join(parts)


def test_close_joins_the_thread_frees_the_port_and_ends_connections(echo: EchoServer) -> None:
    proxy = FaultProxy("127.0.0.1", echo.port)
    client = connect(proxy)
    assert roundtrip(client, b"hi") == b"hi"
    proxy.close()
    assert not proxy.is_running
    with client:
        assert read_to_end(client)[0] == b""
    with socket.create_server(("127.0.0.1", proxy.port)):
        pass  # the port is free again
    proxy.close()  # a second close is harmless
    with pytest.raises(RuntimeError):
        proxy.set_mode("pass")


def test_url_for_and_from_url_point_at_the_proxy(echo: EchoServer) -> None:
    upstream = f"mongodb://user:pw@127.0.0.1:{echo.port}/db?directConnection=true"
    with FaultProxy.from_url(upstream) as proxy:
        assert (proxy.upstream_host, proxy.upstream_port) == ("127.0.0.1", echo.port)
        assert proxy.url_for(upstream) == (
            f"mongodb://user:pw@127.0.0.1:{proxy.port}/db?directConnection=true"
        )
    with pytest.raises(ValueError):
        FaultProxy.from_url("mongodb://127.0.0.1/db")


def test_an_unreachable_upstream_resets_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        dead_port = placeholder.getsockname()[1]
    with FaultProxy("127.0.0.1", dead_port) as proxy:
        assert ending_of_a_new_connection(proxy) == (b"", "reset")


def test_unknown_modes_are_refused(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError):
        proxy.set_mode("flaky")  # type: ignore[arg-type]
    assert proxy.mode == "pass"
