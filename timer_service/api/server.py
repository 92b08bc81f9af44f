"""Serving an ASGI app with uvicorn until a stop event (the API process and `dev`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.types import ASGIApp

from timer_service.api.limits import SERVER_HEADER_BYTES, HeaderLimitMiddleware

log = logging.getLogger(__name__)

LISTEN_BACKLOG = 8192


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises the captured signal
    after shutdown (exit 143 on SIGTERM); here a stop event ends it instead."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_listening is not None:
            self._on_listening()

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
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Serve `app` until `stop` is set, then shut down gracefully and return;
    `on_listening` is called once the socket is bound and the app started.

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
    server = _Server(config, on_listening)
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
