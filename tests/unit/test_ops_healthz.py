"""The daemon's and broker's /healthz: 200 while the process finds nothing wrong, 503
with the reason otherwise (a broker: its store lease lapsed, or a lane stuck)."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from tests.support import free_port
from timer_service.ops_http import OpsServer


async def test_healthz_fails_with_the_reason_the_process_gives() -> None:
    problem: list[str] = []

    async def ready() -> None:
        return None

    port = free_port()
    ops = OpsServer(
        "127.0.0.1", port, CollectorRegistry(), ready, lambda: problem[0] if problem else None
    )
    await ops.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status_code == 200
            problem.append("store heartbeat lapsed 3.0 s ago")
            r = await http.get("/healthz")
            assert r.status_code == 503, r.text
            assert r.json() == {"status": "unhealthy", "detail": problem[0]}
            assert (await http.get("/readyz")).status_code == 200, "ready is another question"
    finally:
        await ops.stop()
