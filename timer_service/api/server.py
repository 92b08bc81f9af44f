"""`timer-service api`: the REST API over MongoDB, served by uvicorn until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from timer_service import wiring
from timer_service.api.app import create_app
from timer_service.api.limits import SERVER_HEADER_BYTES, HeaderLimitMiddleware
from timer_service.clock import SystemClock
from timer_service.errors import LayoutMismatch
from timer_service.logs import setup_logging
from timer_service.metrics import Metrics
from timer_service.runtime import freeze_startup_heap, run_until_signal, wait_event
from timer_service.settings import Settings
from timer_service.store.base import Store
from timer_service.tracing import build_tracing

log = logging.getLogger(__name__)

SETUP_RETRY_S = 2.0


LISTEN_BACKLOG = 8192


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises the captured signal
    after shutdown (exit 143 on SIGTERM); here a stop event ends it instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    app: ASGIApp,
    host: str,
    port: int,
    stop: asyncio.Event | None = None,
    *,
    grace_s: float | None = None,
) -> None:
    """Serve `app` until `stop` is set, then shut down gracefully and return.

    Without a `stop` event, SIGTERM and SIGINT stop it; with one, the caller
    decides when (and handles signals itself)."""
    config = uvicorn.Config(
        HeaderLimitMiddleware(app),
        host=host,
        port=port,
        lifespan="on",
        access_log=False,
        log_config=None,
        h11_max_incomplete_event_size=SERVER_HEADER_BYTES,
        # A burst of thousands of connects must be queued by the kernel, not dropped: a
        # dropped SYN costs its client a 1 s, then 3 s retransmit (capped by somaxconn).
        backlog=LISTEN_BACKLOG,
        timeout_graceful_shutdown=None if grace_s is None else math.ceil(grace_s),
    )
    server = _Server(config)
    with _stop_on_signals(stop) as stop_event:
        watcher = asyncio.create_task(_exit_when_set(stop_event, server))
        try:
            await server.serve()
        finally:
            watcher.cancel()


async def _exit_when_set(stop: asyncio.Event, server: uvicorn.Server) -> None:
    await stop.wait()
    server.should_exit = True


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event | None) -> Iterator[asyncio.Event]:
    if stop is not None:
        yield stop
        return
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, event.set)
    try:
        yield event
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def _setup_store(store: Store, stop: asyncio.Event) -> bool:
    """Create collections and indexes, retrying until the store answers or we are told
    to stop (serving before the unique indexes exist would break idempotent create)."""
    while not stop.is_set():
        try:
            await store.setup()
            return True
        except LayoutMismatch:
            raise  # a configuration error: retrying cannot mend it
        except Exception as exc:
            log.warning("store not ready, retrying", extra={"error": str(exc)})
        await wait_event(stop, SETUP_RETRY_S)
    return False


async def _main(settings: Settings, stop: asyncio.Event) -> None:
    store = wiring.mongo_store(settings)
    tracing = build_tracing(settings.otel_exporter, "timer-service-api")
    try:
        if not await _setup_store(store, stop):
            return
        app = create_app(settings, store, Metrics(), SystemClock(), tracing=tracing)
        freeze_startup_heap()
        log.info("api listening", extra={"host": settings.http_host, "port": settings.http_port})
        await serve(
            app, settings.http_host, settings.http_port, stop, grace_s=settings.shutdown_grace_s
        )
    finally:
        await store.close()
        tracing.close()
        log.info("api stopped")


def run() -> int:
    settings = Settings().with_default_hosts()  # type: ignore[call-arg]  # no pydantic plugin
    setup_logging(settings.log_level)

    return run_until_signal(lambda stop: _main(settings, stop))
