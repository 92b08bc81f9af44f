"""A callback receiver that misbehaves on purpose for some jobs, and records every call."""

from __future__ import annotations

import asyncio
import email.utils
import json
from collections import defaultdict
from dataclasses import dataclass, field

from aiohttp import web

from tests.e2e.harness import now_ms
from tests.support import free_port


@dataclass(frozen=True)
class Reply:
    """One planned answer: a status with its Retry-After (as given, or an HTTP date that
    many seconds after the answer), or no answer for `hang_s`."""

    status: int = 200
    retry_after: str | None = None
    retry_after_date_in_s: float | None = None
    hang_s: float = 0.0

    def retry_after_at(self, answered_ms: int) -> str | None:
        if self.retry_after_date_in_s is not None:
            when_s = answered_ms / 1000 + self.retry_after_date_in_s
            return email.utils.formatdate(when_s, usegmt=True)
        return self.retry_after


@dataclass
class Call:
    """One callback as the receiver saw it; `answered_ms` is None while it hangs."""

    biz_type: str
    job_id: str
    attempt: int
    due_at: int
    fired_at: int
    received_ms: int
    reply: Reply
    answered_ms: int | None = None
    retry_after: str | None = None  # the header as sent

    @property
    def accepted(self) -> bool:
        return self.answered_ms is not None and 200 <= self.reply.status < 300


@dataclass
class ChaosReceiver:
    port: int = field(default_factory=free_port)
    calls: list[Call] = field(default_factory=list)
    plans: dict[str, list[Reply]] = field(default_factory=dict)  # by job_id, in order
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/callback", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        received = now_ms()
        body = json.loads(await request.read())
        plan = self.plans.get(body["job_id"])
        reply = plan.pop(0) if plan else Reply()
        call = Call(
            body["biz_type"],
            body["job_id"],
            body["attempt"],
            body["due_at"],
            body["fired_at"],
            received,
            reply,
        )
        self.calls.append(call)
        if reply.hang_s:
            # The sender gives up first (its timeout is shorter): the answer never arrives.
            await asyncio.sleep(reply.hang_s)
            return web.Response(status=504)
        call.answered_ms = now_ms()
        call.retry_after = reply.retry_after_at(call.answered_ms)
        headers = {} if call.retry_after is None else {"Retry-After": call.retry_after}
        return web.Response(status=reply.status, headers=headers)

    def by_job(self) -> dict[str, list[Call]]:
        out: dict[str, list[Call]] = defaultdict(list)
        for call in self.calls:
            out[call.job_id].append(call)
        return out

    def accepted_jobs(self) -> set[str]:
        return {call.job_id for call in self.calls if call.accepted}
