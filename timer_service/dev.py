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
from dataclasses import replace
from pathlib import Path

from timer_service.api.server import serve
from timer_service.clock import SystemClock
from timer_service.metric_specs import ROLES
from timer_service.processes.build import (
    build_api,
    build_broker,
    build_canary,
    build_daemon,
    build_scheduler,
)
from timer_service.processes.commands import (
    add_canary,
    base_lifecycle,
    started,
    store_and_queue,
)
from timer_service.processes.dependencies import instance_id, real_dependencies
from timer_service.processes.lifecycle import Lifecycle
from timer_service.queue.base import DispatchQueue
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings
from timer_service.wiring import amqp_queue

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
            f"  canary: {canary_line(settings)}",
            "  try:",
            f"    curl -s -X PUT {base}/v1/biz-types/demo{auth}{json} "
            '-d \'{"callback_url": "http://127.0.0.1:9000/callback"}\'',
            f"    curl -s -X POST {base}/v1/jobs{auth}{json} "
            '-d \'{"biz_type": "demo", "delay_ms": 5000, "payload": {"hello": "world"}}\'',
        ]
    )


def canary_line(settings: Settings) -> str:
    if settings.canary_interval_ms == 0:
        return "off (TIMER_CANARY_INTERVAL_MS=0)"
    every_s = settings.canary_interval_ms / 1000
    return (
        f"every {every_s:g} s to {settings.canary_url_or_default()}"
        " (timer_canary_last_success_timestamp_seconds on /metrics)"
    )


async def run_dev(settings: Settings, stop: asyncio.Event) -> None:
    """The three roles, as the production processes build them, over one store and one
    queue; on an embedded store (unless TIMER_MONGO_URL is given) started first and
    stopped last."""
    if settings.mongo_url is not None:
        await _run_roles(settings, stop, None, "MongoDB at TIMER_MONGO_URL")
        return
    from timer_service.embedded import EmbeddedStore

    data_dir = Path(settings.data_dir).absolute()
    embedded = EmbeddedStore(data_dir / "store")
    life = Lifecycle("dev's embedded store", SystemClock(), settings.shutdown_grace_s)
    life.add("embedded store", embedded.start, embedded.stop)
    where = f"embedded SecantusDB in {data_dir}"
    await life.run(stop, lambda: _run_roles(settings, stop, embedded.url, where))


async def _run_roles(
    settings: Settings, stop: asyncio.Event, mongo_url: str | None, store_desc: str
) -> None:
    queue: DispatchQueue
    if settings.amqp_url:
        queue, queue_desc = amqp_queue(settings), "RabbitMQ at TIMER_AMQP_URL"
    else:
        queue, queue_desc = MemoryQueue(), "in-process"
    deps = real_dependencies(
        settings, ROLES, service_name="timer-service-dev", mongo_url=mongo_url, queue=queue
    )
    # One Scheduler for the API and the daemon's hook that chains occurrences.
    scheduler = build_scheduler(deps)
    daemon = build_daemon(settings, deps, scheduler=scheduler)
    broker = build_broker(settings, replace(deps, instance_id=instance_id()))

    def nudge(seconds: Sequence[int]) -> None:
        for second in seconds:
            daemon.nudge(second)

    app = build_api(
        settings, deps, scheduler=scheduler, on_jobs_written=nudge, ready_checks=[queue.ping]
    )
    life = base_lifecycle("dev", settings, deps)
    store_and_queue(life, deps)
    life.add("daemon", daemon.start, daemon.stop)
    life.add("broker", broker.start, broker.stop)
    # Its callbacks come to this process's own API port (Settings.canary_url_or_default).
    add_canary(life, build_canary(settings, deps, on_jobs_written=nudge))
    life.add("startup done", started())

    def listening() -> None:
        print(banner(settings, store_desc, queue_desc), flush=True)

    await life.run(
        stop,
        lambda: serve(app, settings.http_host, settings.http_port, stop, on_listening=listening),
    )
