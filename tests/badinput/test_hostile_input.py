"""Hostile requests against `timer-service api`: each gets a 4xx quickly (never a 5xx,
never a hang), and afterwards the process is healthy, still creates jobs, and the
store holds exactly what it held before."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.badinput.conftest import Api

pytestmark = pytest.mark.integration

TEN_MB = 10 * 1024 * 1024
CHUNK = 64 * 1024
MAX_RSS_GROWTH_KB = 4 * 1024
ANSWER_TIMEOUT_S = 10.0
PROBLEM_JSON = "application/problem+json"


def proc_status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def snapshot(client: httpx.Client) -> dict[str, Any]:
    jobs = client.get("/v1/jobs", params={"limit": 1000})
    bizs = client.get("/v1/biz-types")
    assert jobs.status_code == 200 and bizs.status_code == 200, (jobs.text, bizs.text)
    return {"jobs": jobs.json(), "biz_types": bizs.json()}


@pytest.fixture(scope="module")
def client(api: Api) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, timeout=ANSWER_TIMEOUT_S) as c:
        yield c


@pytest.fixture(autouse=True)
def survives(api: Api, client: httpx.Client) -> Iterator[None]:
    """Around each test: the store is unchanged, /healthz answers, a normal create works."""
    before = snapshot(client)
    yield
    api.assert_running()
    health = client.get("/healthz")
    assert health.status_code == 200, f"expected /healthz 200, got {health.status_code}"
    after = snapshot(client)
    assert after == before, f"expected the store unchanged;\nbefore: {before}\nafter:  {after}"
    created = client.post("/v1/jobs", json={"biz_type": api.biz_type, "delay_ms": 3_600_000})
    assert created.status_code == 201, f"expected a normal create 201, got {created.text}"


def assert_refused(response: httpx.Response, allowed: set[int], *, problem: bool = True) -> None:
    got = f"{response.status_code} {response.headers.get('content-type')} {response.text[:300]}"
    assert response.status_code in allowed, f"expected one of {sorted(allowed)}, got {got}"
    if problem:
        assert response.headers.get("content-type", "").startswith(PROBLEM_JSON), (
            f"expected a problem document, got {got}"
        )
        assert response.json()["status"] == response.status_code, got


def raw_request(api: Api, request: bytes) -> tuple[int, bytes]:
    """Sends bytes no well-behaved client library would; returns (status, whole answer)."""
    port = int(api.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 "), f"expected an HTTP answer, got {answer[:300]!r}"
    return int(status_line.split()[1]), answer


# -- a body over TIMER_MAX_BODY_BYTES -----------------------------------------


def ten_mb_chunks() -> Iterator[bytes]:
    block = b"[" * CHUNK
    for _ in range(TEN_MB // CHUNK):
        yield block


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_10_mb_body_is_refused_without_being_held(
    api: Api, client: httpx.Client, framing: str
) -> None:
    headers = {"Content-Type": "application/json"}
    client.get("/healthz")
    rss_before = proc_status_kb(api.pid, "VmRSS")
    peak_before = proc_status_kb(api.pid, "VmHWM")
    for _ in range(3):
        body = b"[" * TEN_MB if framing == "content-length" else ten_mb_chunks()
        started = time.monotonic()
        response = client.post("/v1/jobs", content=body, headers=headers)
        assert_refused(response, {413})
        assert time.monotonic() - started < ANSWER_TIMEOUT_S
    client.get("/healthz")
    time.sleep(0.2)
    rss_after = proc_status_kb(api.pid, "VmRSS")
    peak_after = proc_status_kb(api.pid, "VmHWM")
    growth_kb = rss_after - rss_before
    print(
        f"\n[{framing}] 3 x 10 MB refused: RSS {rss_before} -> {rss_after} kB "
        f"({growth_kb:+d} kB), peak {peak_before} -> {peak_after} kB"
    )
    # The peak says whether a body was held whole; what the allocator keeps after a
    # refused chunked body (up to the 8 MiB limit was read) varies run to run.
    peak_growth_kb = peak_after - peak_before
    assert peak_growth_kb < TEN_MB // 1024, (
        f"expected the API never to hold a whole 10 MB body: its peak RSS grew by "
        f"{peak_growth_kb} kB ({peak_before} -> {peak_after} kB)"
    )
    assert growth_kb < MAX_RSS_GROWTH_KB + (0 if framing == "content-length" else 8 * 1024), (
        f"expected the API's RSS to grow by < {MAX_RSS_GROWTH_KB} kB after 3 x 10 MB bodies "
        f"(plus the 8 MiB read of a chunked one), it grew by {growth_kb} kB "
        f"({rss_before} -> {rss_after} kB)"
    )


# -- bodies that are not JSON, or JSON no parser should take ------------------

DEEP = 100_000
HUGE_INT = b"9" * 5000
BAD_BODIES = {
    "100k-deep array": (b"[" * DEEP + b"]" * DEEP, {400}),
    "100k-deep unclosed": (b"[" * DEEP, {400}),
    "100k-deep payload": (
        b'{"biz_type":"orders","delay_ms":1,"payload":' + b"[" * DEEP + b"]" * DEEP + b"}",
        {400},
    ),
    "invalid utf-8": (b'{"biz_type":"orders\xff\xfe","delay_ms":1}', {400}),
    "overlong utf-8": (b'{"biz_type":"orders","delay_ms":1,"payload":"\xc0\xaf"}', {400}),
    "lone surrogate escape": (b'{"biz_type":"orders","delay_ms":1,"payload":"\\ud800"}', {422}),
    "1e400 due_at": (b'{"biz_type":"orders","due_at":1e400}', {400, 422}),
    "1e400 payload": (b'{"biz_type":"orders","delay_ms":1,"payload":1e400}', {400, 422}),
    "5000-digit due_at": (b'{"biz_type":"orders","due_at":' + HUGE_INT + b"}", {400, 422}),
    "5000-digit delay_ms": (b'{"biz_type":"orders","delay_ms":' + HUGE_INT + b"}", {400, 422}),
    "5000-digit payload": (
        b'{"biz_type":"orders","delay_ms":1,"payload":' + HUGE_INT + b"}",
        {400, 422},
    ),
    "NaN payload": (b'{"biz_type":"orders","delay_ms":1,"payload":NaN}', {400}),
    "Infinity due_at": (b'{"biz_type":"orders","due_at":Infinity}', {400}),
    "-Infinity delay_ms": (b'{"biz_type":"orders","delay_ms":-Infinity}', {400}),
    "null byte in json": (b'{"biz_type":"orders\x00","delay_ms":1}', {400}),
    "empty": (b"", {400}),
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/jobs"),
        ("POST", "/v1/jobs:batch"),
        ("PUT", "/v1/biz-types/orders"),
        ("PATCH", "/v1/jobs/orders/absent"),
    ],
)
def test_a_bad_body_is_a_4xx(api: Api, client: httpx.Client, method: str, path: str, name: str):
    body, statuses_for_create = BAD_BODIES[name]
    response = client.request(
        method, path, content=body, headers={"Content-Type": "application/json"}
    )
    # The bodies are create bodies: elsewhere they break other rules too (or name no job).
    expected = statuses_for_create if path == "/v1/jobs" else set(range(400, 500))
    assert_refused(response, expected)


# -- headers, URLs and path parameters ---------------------------------------


def test_a_1_mb_header_is_a_4xx(client: httpx.Client) -> None:
    response = client.get("/v1/jobs", headers={"X-Big": "a" * 1024 * 1024})
    # Refused by the HTTP server before the app (uvicorn answers text/plain).
    assert_refused(response, set(range(400, 500)), problem=False)


def test_a_32_kb_header_is_a_431_problem(client: httpx.Client) -> None:
    response = client.get("/v1/jobs", headers={"X-Big": "a" * 32 * 1024})
    assert_refused(response, {431})
    assert "bytes of headers" in response.json()["detail"]


def test_200_headers_are_a_4xx(client: httpx.Client) -> None:
    response = client.get("/v1/jobs", headers={f"X-H{i}": "v" for i in range(200)})
    assert_refused(response, {431})


def test_a_100_kb_path_is_a_4xx(api: Api) -> None:
    for target in (b"/v1/jobs/orders/" + b"a" * 100_000, b"/" + b"a" * 100_000):
        status, answer = raw_request(
            api, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert 400 <= status < 500, f"expected a 4xx for a 100 KB path, got {answer[:300]!r}"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/jobs/orders/a%00b"),
        ("DELETE", "/v1/jobs/orders/a%00b"),
        ("POST", "/v1/jobs/orders/a%00b/replay"),
        ("GET", "/v1/jobs/or%00ders/a"),
        ("GET", "/v1/biz-types/or%00ders"),
        ("DELETE", "/v1/biz-types/or%00ders"),
        ("GET", "/v1/jobs?biz_type=or%00ders"),
    ],
)
def test_a_null_byte_in_a_path_parameter_is_422(
    client: httpx.Client, method: str, path: str
) -> None:
    assert_refused(client.request(method, path), {422})


def test_a_null_byte_in_a_percent_encoded_put_path_is_422(client: httpx.Client) -> None:
    response = client.put(
        "/v1/biz-types/or%00ders", json={"callback_url": "http://127.0.0.1:9/callback"}
    )
    assert_refused(response, {422})


def test_a_raw_null_byte_in_the_request_line_is_400(api: Api) -> None:
    status, answer = raw_request(
        api, b"GET /v1/jobs/orders/a\x00b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert status == 400, f"expected 400, got {answer[:300]!r}"
