"""The production processes: `timer-service api|daemon|broker` (and `python -m
daemon|broker`). Each is a lifecycle over the real dependencies: the parts start in
the order added and stop in reverse."""

from __future__ import annotations

import asyncio
import logging

from timer_service.api.server import serve
from timer_service.canary import Canary
from timer_service.metric_specs import API, BROKER, DAEMON
from timer_service.ops_http import HealthCheck, OpsServer
from timer_service.processes.build import build_api, build_broker, build_canary, build_daemon
from timer_service.processes.dependencies import Dependencies, real_dependencies
from timer_service.processes.lifecycle import Action, Lifecycle
from timer_service.runtime import freeze_startup_heap
from timer_service.settings import Settings

log = logging.getLogger(__name__)

DAEMON_METRICS_PORT = 9101
BROKER_METRICS_PORT = 9102


async def run_api(settings: Settings, stop: asyncio.Event) -> None:
    deps = real_dependencies(settings, API, service_name="timer-service-api")
    app = build_api(settings, deps)
    life = base_lifecycle("api", settings, deps)
    # Serving before the unique indexes exist would break idempotent create.
    life.dependency("store", deps.store.setup)
    add_canary(life, build_canary(settings, deps))
    life.add("startup done", started())

    async def serve_http() -> None:
        def listening() -> None:
            where = {"host": settings.http_host, "port": settings.http_port}
            log.info("api listening", extra=where)

        await serve(
            app,
            settings.http_host,
            settings.http_port,
            stop,
            grace_s=settings.shutdown_grace_s,
            on_listening=listening,
        )

    await life.run(stop, serve_http)


async def run_daemon(settings: Settings, stop: asyncio.Event) -> None:
    deps = real_dependencies(settings, DAEMON, service_name="timer-service-daemon")
    daemon = build_daemon(settings, deps)
    life = base_lifecycle("daemon", settings, deps)
    _ops_server(life, settings, deps, DAEMON_METRICS_PORT)
    store_and_queue(life, deps)
    life.add("daemon", daemon.start, daemon.stop)
    life.add("startup done", started("daemon started", holder=daemon.holder_id))
    await life.run(stop, None)


async def run_broker(settings: Settings, stop: asyncio.Event) -> None:
    deps = real_dependencies(settings, BROKER, service_name="timer-service-broker")
    broker = build_broker(settings, deps)
    life = base_lifecycle("broker", settings, deps)
    _ops_server(life, settings, deps, BROKER_METRICS_PORT, health=broker.health)
    store_and_queue(life, deps)
    life.add("broker", broker.start, broker.stop)  # it logs "broker started"
    life.add("startup done", started())
    await life.run(stop, None)


def base_lifecycle(process: str, settings: Settings, deps: Dependencies) -> Lifecycle:
    """The parts every process has first (and so stops last): tracing and the store's
    client. Created already; here only closed."""
    life = Lifecycle(process, deps.clock, settings.shutdown_grace_s)

    async def close_tracing() -> None:
        deps.tracing.close()

    life.add("tracing", stop=close_tracing)
    life.add("store client", stop=deps.store.close)
    return life


def add_canary(life: Lifecycle, canary: Canary | None) -> None:
    """The canary's task, once the store is set up (none when it is off)."""
    if canary is not None:
        life.add("canary", canary.start, canary.stop)


def store_and_queue(life: Lifecycle, deps: Dependencies) -> None:
    """Infrastructure may come up after us: each is retried until it answers."""
    queue = deps.with_queue()
    life.dependency("store", deps.store.setup)
    life.add("queue client", stop=queue.close)
    life.dependency("queue", queue.connect)


def _ops_server(
    life: Lifecycle,
    settings: Settings,
    deps: Dependencies,
    port: int,
    health: HealthCheck | None = None,
) -> None:
    """/metrics, /healthz and /readyz from the start: /readyz answers 503 while the
    store or the queue is down, /healthz 200 while the process runs and `health` finds
    nothing wrong (a broker: its store lease lapsed, or a lane stuck)."""
    queue = deps.with_queue()

    async def ready() -> None:
        await deps.store.ping()
        await queue.ping()

    ops = OpsServer(
        settings.metrics_host, settings.metrics_port or port, deps.metrics.registry, ready, health
    )
    life.add("ops server", ops.start, ops.stop)


def started(message: str | None = None, **extra: str) -> Action:
    """The last part: everything alive now is the startup's (runtime.freeze_startup_heap)."""

    async def done() -> None:
        freeze_startup_heap()
        if message is not None:
            log.info(message, extra=extra)

    return done
