"""/metrics, /healthz and /readyz for the daemon and broker (aiohttp, tiny)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from timer_service.metrics import CONTENT_TYPE_LATEST, render

ReadyCheck = Callable[[], Awaitable[None]]  # raises when not ready
HealthCheck = Callable[[], str | None]  # why the process is unhealthy; None: it is healthy


def _json(status: int, body: dict[str, object]) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


class OpsServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        ready: ReadyCheck,
        health: HealthCheck | None = None,
    ) -> None:
        self._host = host
        self._health = health
        self._port = port
        self._registry = registry
        self._ready = ready
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, _: web.Request) -> web.Response:
        body = render(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        problem = None if self._health is None else self._health()
        if problem is not None:
            return _json(503, {"status": "unhealthy", "detail": problem})
        return _json(200, {"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        try:
            await self._ready()
        except Exception as exc:
            return _json(503, {"status": "unavailable", "detail": str(exc)})
        return _json(200, {"status": "ok"})
