"""An unauthenticated client cannot make `timer-service api` read its body: the 401 comes
on the request head alone, with Connection: close, and the rest of a 100 MB chunked body
meets a closed connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.harness import Service
from tests.support import SecantusServer, free_port, unique_name

pytestmark = pytest.mark.integration

TOKEN = "tok-ops"
HUNDRED_MB = 100 * 1024 * 1024
CHUNK = 64 * 1024
# What loopback socket buffers (ours to send, the server's to receive) can take before
# the closed connection shows; far below the 100 MB offered.
MAX_ACCEPTED_BYTES = 16 * 1024 * 1024
ANSWER_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def api_port(secantus: SecantusServer) -> Iterator[int]:
    port = free_port()
    env = {
        "TIMER_MONGO_URL": secantus.url,
        "TIMER_MONGO_DB": unique_name("auth"),
        "TIMER_HTTP_PORT": str(port),
        "TIMER_LOG_LEVEL": "WARNING",
        "TIMER_SHUTDOWN_GRACE_S": "3",
        "TIMER_API_TOKENS": f"ops={TOKEN}",
    }
    service = Service("api", env, port, name=f"badinput-auth-{env['TIMER_MONGO_DB']}").start()
    try:
        yield port
    finally:
        service.stop_quietly()


def read_answer_head(sock: socket.socket) -> bytes:
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    return answer


def test_a_100_mb_chunked_body_without_a_token_is_not_read(api_port: int) -> None:
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = f"{CHUNK:x}\r\n".encode() + b"[" * CHUNK + b"\r\n"
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", api_port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(head)
        answer = read_answer_head(sock)  # before a single body byte is sent
        status_line, _, rest = answer.partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 401"), f"expected a 401, got {answer[:300]!r}"
        assert b"connection: close" in rest.lower(), f"expected Connection: close: {rest!r}"
        accepted = 0
        refused = None
        while accepted < HUNDRED_MB:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError) as exc:
                refused = exc
                break
            accepted += len(chunk)
    elapsed_s = time.monotonic() - started
    print(f"\n401 then {accepted / 2**20:.1f} MiB taken by socket buffers in {elapsed_s:.2f} s")
    assert refused is not None, f"expected the connection closed, {accepted} bytes went in"
    assert accepted < MAX_ACCEPTED_BYTES, (
        f"expected at most {MAX_ACCEPTED_BYTES} bytes accepted after the 401, got {accepted}"
    )
    assert elapsed_s < ANSWER_TIMEOUT_S, f"expected it over within {ANSWER_TIMEOUT_S} s"


def test_the_same_request_with_a_token_is_read(api_port: int) -> None:
    url = f"http://127.0.0.1:{api_port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=ANSWER_TIMEOUT_S, headers=headers) as client:
        put = client.put("/v1/biz-types/orders", json={"callback_url": "http://127.0.0.1:9/cb"})
        assert put.status_code in (200, 201), put.text
        created = client.post("/v1/jobs", json={"biz_type": "orders", "delay_ms": 3_600_000})
        assert created.status_code == 201, created.text
        anonymous = httpx.get(f"{url}/v1/biz-types", timeout=ANSWER_TIMEOUT_S)
        assert anonymous.status_code == 401, anonymous.text
