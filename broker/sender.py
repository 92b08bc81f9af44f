"""HTTP for callbacks: one aiohttp session per process, created at start, closed at stop.

aiohttp over httpx by measurement (bench/http_client_bench.py). The connector
has no global or per-host connection limit: each biz type's in-flight cap
bounds its sockets, so one hanging endpoint cannot use up a shared pool. A
callback's timeout runs on the injected clock, not aiohttp's.
"""

from __future__ import annotations

import aiohttp

from broker.callback import CallbackRequest, Response
from timer_service.clock import Clock

MAX_RESPONSE_BYTES = 64 * 1024  # read (and discard) at most this much of an answer


class Sender:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=10)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(),  # none: post() bounds each callback
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        try:
            return await self._clock.wait_for(self._post(url, request), timeout_s)
        except TimeoutError:
            return Response(None, error="timeout")
        except (aiohttp.ClientError, OSError) as exc:
            return Response(None, error=f"connection error: {_describe(exc)}")

    async def _post(self, url: str, request: CallbackRequest) -> Response:
        assert self._session is not None, "Sender.start() first"
        async with self._session.post(
            url, data=request.body, headers=request.headers, allow_redirects=False
        ) as resp:
            # Draining a small answer lets the connection be reused.
            await resp.content.read(MAX_RESPONSE_BYTES)
            return Response(resp.status, resp.headers.get("Retry-After"))

    @property
    def is_open(self) -> bool:
        return self._session is not None and not self._session.closed


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]
