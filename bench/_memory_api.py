"""The REST API over the in-memory store, served like `timer-service api` (for benchmarks).

Usage: python bench/_memory_api.py PORT
"""

from __future__ import annotations

import asyncio
import sys

from timer_service.api.app import create_app
from timer_service.api.server import serve
from timer_service.clock import SystemClock
from timer_service.logs import setup_logging
from timer_service.metrics import Metrics
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore


async def main(port: int) -> None:
    settings = Settings()  # type: ignore[call-arg]
    setup_logging("WARNING")
    store = MemoryStore(buckets=settings.buckets, retention_ms=settings.retention_ms)
    await store.setup()
    app = create_app(settings, store, Metrics(), SystemClock())
    try:
        await serve(app, "127.0.0.1", port)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
