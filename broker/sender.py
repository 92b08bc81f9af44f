"""HTTP for callbacks: one aiohttp session per process, created at start, closed at stop.

aiohttp over httpx by measurement (bench/http_client_bench.py). The connector
has no global or per-host connection limit: each biz type's in-flight cap
bounds its sockets, so one hanging endpoint cannot use up a shared pool. A
callback's timeout runs on the injected clock, not aiohttp's. Every host is
checked against the callback target policy (broker/targets.py) on the
addresses actually connected to; redirects are never followed (a 3xx is an
answer, judged like any other status), and no proxy is taken from the
environment.
"""

from __future__ import annotations

import aiohttp
from aiohttp.abc import AbstractResolver

from broker.callback import CallbackRequest, Response
from broker.targets import GuardedResolver, LiteralRefusals, refusal_in
from timer_service.callback_targets import TargetPolicy, redact
from timer_service.clock import Clock
from timer_service.responses import CAPTURE_BYTES

MAX_RESPONSE_BYTES = 64 * 1024  # read (and discard) at most this much of an answer


class Sender:
    def __init__(
        self,
        clock: Clock,
        policy: TargetPolicy | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._clock = clock
        self._policy = policy if policy is not None else TargetPolicy()
        self._literal_refusal = LiteralRefusals(self._policy)
        self._resolver = resolver  # None: aiohttp's default (tests inject a fake one)
        self._session: aiohttp.ClientSession | None = None
        self._guarded: GuardedResolver | None = None

    async def start(self) -> None:
        # A resolver passed in is ours to close: the connector closes only its own.
        self._guarded = GuardedResolver(self._policy, self._resolver)
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0,
            ttl_dns_cache=10,  # caches only what the guarded resolver let through
            resolver=self._guarded,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(),  # none: post() bounds each callback
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            trust_env=False,  # an HTTP(S)_PROXY would connect past the policy
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._guarded is not None:
            await self._guarded.close()
            self._guarded = None

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        """The answer, or what went wrong, with any credentials of `url` (stored before
        they were refused at registration) redacted from the error."""
        why = self._literal_refusal(url)
        if why is not None:
            return _refused(f"refused by the callback target policy: {why}")
        try:
            return await self._clock.wait_for(self._post(url, request), timeout_s)
        except TimeoutError:
            return Response(None, error="timeout")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            refusal = refusal_in(exc)
            if refusal is not None:
                return _refused(str(refusal))
            return Response(None, error=f"connection error: {redact(_describe(exc), url)}")

    async def _post(self, url: str, request: CallbackRequest) -> Response:
        assert self._session is not None, "Sender.start() first"
        async with self._session.post(
            url, data=request.body, headers=request.headers, allow_redirects=False
        ) as resp:
            # One read, as ever: it drains a small answer so the connection can be
            # reused. The answer's start is kept with the attempt (timer_service.responses):
            # what that read brought, plus whatever else has arrived, never waiting for
            # more, so that a body slower than its status cannot turn a 2xx into a timeout.
            body = await resp.content.read(MAX_RESPONSE_BYTES)
            while len(body) < CAPTURE_BYTES and not resp.content.at_eof():
                more = resp.content.read_nowait(CAPTURE_BYTES - len(body))
                if not more:
                    break
                body += more
            return Response(
                resp.status,
                resp.headers.get("Retry-After"),
                headers=tuple(resp.headers.items()),
                body=body[:CAPTURE_BYTES],
                complete=len(body) <= CAPTURE_BYTES and resp.content.at_eof(),
            )

    @property
    def is_open(self) -> bool:
        return self._session is not None and not self._session.closed


def _refused(error: str) -> Response:
    return Response(None, error=error[:300], refused=True)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]
