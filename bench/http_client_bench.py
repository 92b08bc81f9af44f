"""aiohttp vs httpx for callbacks: N POSTs at high concurrency to a fast local receiver.

The receiver is a separate process (a minimal asyncio HTTP/1.1 server that
answers 200 at once), so the client's CPU is measured alone.

    .venv/bin/python bench/http_client_bench.py [--requests 20000] [--runs 3]
    .venv/bin/python bench/http_client_bench.py serve --port 8999   # the receiver alone

Prints requests/s and client CPU µs per request, medians of the runs, for
concurrency 64 and 256.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from _common import serve_protocol, start_server_process

BODY = json.dumps(
    {
        "biz_type": "bench",
        "job_id": "job-000001",
        "payload": {"order": 42, "note": "x" * 64},
        "due_at": 1767225600000,
        "fired_at": 1767225600004,
        "attempt": 1,
    },
    separators=(",", ":"),
).encode()
HEADERS = {
    "Content-Type": "application/json",
    "Idempotency-Key": "bench:job-000001",
    "X-Timer-Attempt": "1",
    "X-Timer-Timestamp": "1767225600004",
    "User-Agent": "timer-service/0.1.0",
    "webhook-id": "bench:job-000001",
    "webhook-timestamp": "1767225600",
    "webhook-signature": "v1," + "A" * 43 + "=",
}
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"


# -- the receiver -------------------------------------------------------------------------


class FastReceiver(asyncio.Protocol):
    """Just enough HTTP/1.1: headers, a Content-Length body, keep-alive, 200."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            assert self.transport is not None
            self.transport.write(RESPONSE)


def serve(port: int) -> None:
    serve_protocol(FastReceiver, port)


def start_receiver() -> tuple[subprocess.Popen[bytes], int]:
    return start_server_process(os.path.abspath(__file__))


# -- the clients --------------------------------------------------------------------------

Poster = Callable[[], Awaitable[int]]


async def run_aiohttp(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        timeout = aiohttp.ClientTimeout(total=10)

        async def post() -> int:
            async with session.post(
                url, data=BODY, headers=HEADERS, timeout=timeout, allow_redirects=False
            ) as resp:
                await resp.read()
                return resp.status

        return await drive(post, requests, concurrency)


async def run_httpx(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    # httpcore tries `import sniffio` several times per request; this venv lacks it, and a
    # failed import scans sys.path every time (~700 µs/request here). A None entry makes
    # that import fail at once, so httpx is measured as it runs where sniffio resolves.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:

        async def post() -> int:
            resp = await client.post(url, content=BODY, headers=HEADERS)
            return resp.status_code

        return await drive(post, requests, concurrency)


async def drive(post: Poster, requests: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, client CPU µs per request) for `requests` posts, `concurrency` at once."""
    for _ in range(concurrency):  # warm the connections
        await post()
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            status = await post()
            assert status == 200, status

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return requests / wall, cpu / requests * 1e6


CLIENTS = {"aiohttp": run_aiohttp, "httpx": run_httpx}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "serve"])
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.port)
        return
    proc, port = start_receiver()
    url = f"http://127.0.0.1:{port}/cb"
    try:
        print(f"{'client':8} {'conc':>5} {'req/s':>9} {'cpu µs/req':>11}   (median of {args.runs})")
        for concurrency in args.concurrency:
            for name, client in CLIENTS.items():
                results = [
                    asyncio.run(client(url, args.requests, concurrency)) for _ in range(args.runs)
                ]
                rps = statistics.median(r[0] for r in results)
                cpu = statistics.median(r[1] for r in results)
                print(f"{name:8} {concurrency:5d} {rps:9.0f} {cpu:11.0f}", flush=True)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
