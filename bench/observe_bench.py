"""What the API's observe middleware (request id, RED metrics, the access log line,
trace context) costs per request, measured around a do-nothing ASGI app so that only
its own work counts: the access line formatted as JSON into a null stream (as in
production, minus the write), a `traceparent` on every request.

    .venv/bin/python bench/observe_bench.py [requests]
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import time
from typing import Any

from starlette.routing import Route

from timer_service.api.observe import ObserveMiddleware
from timer_service.clock import SystemClock
from timer_service.logs import ContextFilter, JsonFormatter
from timer_service.metrics import Metrics
from timer_service.tracing import NO_TRACING

ROUTE = Route("/v1/jobs/{biz_type}/{job_id}", lambda r: None)
START = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
BODY = {"type": "http.response.body", "body": b"{}"}


async def app(scope: Any, receive: Any, send: Any) -> None:
    scope["route"] = ROUTE  # what the router leaves
    await send(START)
    await send(BODY)


def scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": "/v1/jobs/orders/o-1",
        "client": ("10.0.0.1", 5000),
        "headers": [
            (b"host", b"api"),
            (b"x-request-id", b"req-1234"),
            (b"traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ],
    }


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b""}


async def send(_: Any) -> None:
    return None


async def per_request_us(target: Any, requests: int) -> float:
    for _ in range(1000):
        await target(scope(), receive, send)
    started = time.perf_counter()
    for _ in range(requests):
        await target(scope(), receive, send)
    return (time.perf_counter() - started) / requests * 1e6


def main() -> None:
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    observed = ObserveMiddleware(app, Metrics(), SystemClock(), NO_TRACING)
    bare, seen = [], []
    for _ in range(3):  # interleaved, best of 3: the machine is shared
        bare.append(asyncio.run(per_request_us(app, requests)))
        seen.append(asyncio.run(per_request_us(observed, requests)))
    logging.getLogger().setLevel(logging.WARNING)
    quiet = min(asyncio.run(per_request_us(observed, requests)) for _ in range(3))
    print(f"{requests} requests, best of 3; a bare ASGI call takes {min(bare):.1f} µs")
    print(f"observe middleware, access line at INFO:  {min(seen) - min(bare):6.1f} µs / request")
    print(f"observe middleware, access log disabled:  {quiet - min(bare):6.1f} µs / request")


if __name__ == "__main__":
    main()
