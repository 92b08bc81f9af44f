"""Write each process's /metrics page to a directory, for `promtool check metrics`.

The API's page is scraped from a short-lived in-memory app after a few requests (so
its per-route series exist); the daemon's and broker's from an OpsServer (their
/metrics server) on a free port, over a registry their work has filled through the
metrics facade. Usage: python .ci/metrics_pages.py OUT_DIR   (writes api.prom,
daemon.prom, broker.prom; .ci/static-checks runs it).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx

from timer_service.api import create_app
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.ops_http import OpsServer
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore

NOW = 1_767_225_600_000


async def api_page() -> str:
    store = MemoryStore(buckets=60, retention_ms=86_400_000)
    await store.setup()
    app = create_app(Settings(_env_file=None), store, Metrics(), FakeClock(NOW))  # type: ignore[call-arg]
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        await client.put("/v1/biz-types/orders", json={"callback_url": "http://127.0.0.1:1/"})
        await client.post("/v1/jobs", json={"biz_type": "orders", "job_id": "a", "delay_ms": 1})
        await client.get("/v1/jobs/orders/a")
        await client.get("/v1/jobs/orders/missing")
        await client.post("/v1/jobs", content=b"{", headers={"Content-Type": "application/json"})
        await client.get("/no/such/path")
        response = await client.get("/metrics")
    response.raise_for_status()
    return response.text


def daemon_work(metrics: Metrics) -> None:
    metrics.leader(True)
    metrics.scan_lag(0.2)
    metrics.job_dispatched("orders", 0.004)
    metrics.jobs_by_state({("orders", "pending"): 3, ("orders", "dead"): 1})
    metrics.publish_failed()
    metrics.job_reconciled("orders")
    metrics.schedule_run("orders")
    metrics.seconds_restored(1)
    metrics.store_error("scan")


def broker_work(metrics: Metrics) -> None:
    metrics.callback_sent("orders", 1, 0.003)
    metrics.callback_outcome("orders", "delivered", 0.012)
    metrics.callback_outcome("orders", "retry", 0.5)
    metrics.callback_early("orders", 0.001)
    metrics.rate_limited("orders")
    metrics.message_dropped("orders")
    metrics.store_error("fetch_for_send")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def ops_page(work: Callable[[Metrics], None]) -> str:
    metrics = Metrics()
    work(metrics)

    async def ready() -> None:
        return None

    port = free_port()
    server = OpsServer("127.0.0.1", port, metrics.registry, ready)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                response.raise_for_status()
                return await response.text()
    finally:
        await server.stop()


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pages = {
        "api": await api_page(),
        "daemon": await ops_page(daemon_work),
        "broker": await ops_page(broker_work),
    }
    for name, text in pages.items():
        (out / f"{name}.prom").write_text(text)
        print(f"{name}.prom: {len(text.splitlines())} lines")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
