"""`timer-service dev`: API, daemon and broker in one process, on embedded defaults.

The same code paths as production except the queue adapter: an embedded
MongoDB-protocol store under TIMER_DATA_DIR unless TIMER_MONGO_URL is set, and an
in-process queue unless TIMER_AMQP_URL is set. Everything, /metrics included, is
served on the API port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from timer_service.clock import SystemClock
from timer_service.logs import setup_logging
from timer_service.metrics import Metrics
from timer_service.queue.base import DispatchQueue
from timer_service.queue.memory import MemoryQueue
from timer_service.runtime import freeze_startup_heap, run_until_signal
from timer_service.settings import Settings
from timer_service.tracing import build_tracing
from timer_service.wiring import amqp_queue, mongo_store

log = logging.getLogger("timer_service.dev")


def banner(settings: Settings, store_desc: str, queue_desc: str) -> str:
    base = f"http://{settings.http_host}:{settings.http_port}"
    # Double quotes: the shell expands $TIMER_API_TOKEN in the copied command.
    auth = ""
    if settings.api_token:
        auth = ' -H "Authorization: Bearer $TIMER_API_TOKEN"'
    elif settings.named_tokens():
        auth = ' -H "Authorization: Bearer <a token of TIMER_API_TOKENS>"'

    json = " -H 'Content-Type: application/json'"
    return "\n".join(
        [
            f"timer-service dev: listening on {base}",
            f"  store: {store_desc}",
            f"  queue: {queue_desc}",
            f"  docs:  {base}/docs   metrics: {base}/metrics",
            "  try:",
            f"    curl -s -X PUT {base}/v1/biz-types/demo{auth}{json} "
            '-d \'{"callback_url": "http://127.0.0.1:9000/callback"}\'',
            f"    curl -s -X POST {base}/v1/jobs{auth}{json} "
            '-d \'{"biz_type": "demo", "delay_ms": 5000, "payload": {"hello": "world"}}\'',
        ]
    )


async def serve_dev(settings: Settings, stop: asyncio.Event) -> None:
    from broker.app import Broker
    from daemon.app import Daemon
    from daemon.schedule_hook import ScheduleHook
    from timer_service.api.app import create_app
    from timer_service.api.server import serve
    from timer_service.embedded import EmbeddedStore
    from timer_service.wiring import scheduler as default_scheduler

    embedded: EmbeddedStore | None = None
    data_dir = Path(settings.data_dir).absolute()
    mongo_url = settings.mongo_url
    if mongo_url is None:
        embedded = EmbeddedStore(data_dir / "store")
        await embedded.start()
        mongo_url = embedded.url
        store_desc = f"embedded SecantusDB in {data_dir}"
    else:
        store_desc = "MongoDB at TIMER_MONGO_URL"
    store = mongo_store(settings, mongo_url)
    queue: DispatchQueue
    if settings.amqp_url:
        queue, queue_desc = amqp_queue(settings), "RabbitMQ at TIMER_AMQP_URL"
    else:
        queue, queue_desc = MemoryQueue(), "in-process"
    try:
        await store.setup()
        await queue.connect()
        metrics, clock = Metrics(), SystemClock()
        tracing = build_tracing(settings.otel_exporter, "timer-service-dev")
        # One Scheduler for the API and the daemon's hook that chains occurrences.
        scheduler = default_scheduler(store, metrics, clock)
        daemon = Daemon(
            settings,
            store,
            queue,
            metrics,
            clock,
            schedule_hook=ScheduleHook(scheduler),
            tracing=tracing,
        )
        broker = Broker(settings, store, queue, metrics, clock, tracing=tracing)

        def nudge(seconds: Sequence[int]) -> None:
            for second in seconds:
                daemon.nudge(second)

        app = create_app(
            settings,
            store,
            metrics,
            clock,
            on_jobs_written=nudge,
            ready_checks=[queue.ping],
            scheduler=scheduler,
            tracing=tracing,
        )
        await daemon.start()
        await broker.start()
        freeze_startup_heap()
        print(banner(settings, store_desc, queue_desc), flush=True)
        try:
            await serve(app, settings.http_host, settings.http_port, stop)
        finally:
            await broker.stop()
            await daemon.stop()
            tracing.close()
    finally:
        await queue.close()
        await store.close()
        if embedded is not None:
            await embedded.stop()


def run() -> int:
    settings = Settings().with_default_hosts()
    setup_logging(settings.log_level)
    return run_until_signal(lambda stop: serve_dev(settings, stop))
