"""Starting the real processes as a user would, and a receiver that records callbacks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.support import free_port, wait_port

BIN = Path(sys.executable).parent
LOG_DIR = Path(os.environ.get("TEST_LOG_DIR", "/tmp/timer-e2e-logs"))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Service:
    """One `timer-service <command>` subprocess with its own env and log file."""

    def __init__(self, command: str, env: dict[str, str], port: int, name: str | None = None):
        self.command = command
        self.env = {**os.environ, **env}
        self.port = port
        self.name = name or command
        self.proc: subprocess.Popen[bytes] | None = None
        LOG_DIR.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        """Named after the service as it is now (fixtures rename `daemon` to `daemon-a`)."""
        return LOG_DIR / f"{self.name}-{self.port}.log"

    def start(self, timeout_s: float = 60) -> Service:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "timer-service"), self.command], env=self.env, stdout=log, stderr=log
        )
        log.close()
        try:
            wait_port(self.port, timeout_s)
            self.wait_ready(timeout_s)
        except Exception:
            raise RuntimeError(f"{self.name} did not start; log:\n{self.tail()}") from None
        return self

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                r = httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout_s}s")

    def terminate(self, timeout_s: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        self.proc = None
        return code

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    def stop_quietly(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text


@dataclass
class Arrival:
    job_id: str
    at_ms: int
    attempt: int
    due_at: int
    fired_at: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    """Records every callback; a per-job plan can answer with other statuses first."""

    port: int = field(default_factory=free_port)
    arrivals: list[Arrival] = field(default_factory=list)
    plans: dict[str, list[int]] = field(default_factory=dict)
    # Seconds to wait before answering a job's callbacks (a hanging endpoint).
    answer_after_s: dict[str, float] = field(default_factory=dict)
    on_arrival: Callable[[Arrival], None] | None = None
    # An answer of its own for a callback (None: the plan's, or 200 {"ok": true}).
    respond: Callable[[Arrival], web.Response | None] | None = None
    up: bool = True
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/callback", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        at = now_ms()
        body = json.loads(await request.read())
        arrival = Arrival(
            body["job_id"],
            at,
            body["attempt"],
            body["due_at"],
            body["fired_at"],
            dict(request.headers),
            body,
        )
        self.arrivals.append(arrival)
        if self.on_arrival:
            self.on_arrival(arrival)
        hang_s = self.answer_after_s.get(body["job_id"])
        if hang_s:
            await asyncio.sleep(hang_s)
        answer = None if self.respond is None else self.respond(arrival)
        if answer is not None:
            return answer
        plan = self.plans.get(body["job_id"])
        if plan:
            return web.Response(status=plan.pop(0))
        return web.json_response({"ok": True})

    def by_job(self) -> dict[str, list[Arrival]]:
        out: dict[str, list[Arrival]] = defaultdict(list)
        for a in self.arrivals:
            out[a.job_id].append(a)
        return out

    async def wait_for(self, job_ids: set[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            delivered = {a.job_id for a in self.arrivals}
            if job_ids <= delivered:
                return
            await asyncio.sleep(0.1)
        missing = sorted(job_ids - {a.job_id for a in self.arrivals})
        raise AssertionError(f"{len(missing)} jobs never called back, e.g. {missing[:10]}")


def lateness_report(label: str, arrivals: list[Arrival]) -> dict[str, float]:
    late = sorted(a.at_ms - a.due_at for a in arrivals if a.attempt == 1)
    sent = sorted(a.fired_at - a.due_at for a in arrivals if a.attempt == 1)
    q = statistics.quantiles(late, n=100) if len(late) > 1 else [late[0]] * 99
    report = {"n": len(late), "p50": q[49], "p99": q[98], "max": late[-1], "min_sent": sent[0]}
    transit = sorted(a.at_ms - a.fired_at for a in arrivals if a.attempt == 1)
    print(
        f"\n[{label}] lateness (received - due) over {report['n']} callbacks: "
        f"p50={report['p50']:.1f} ms p99={report['p99']:.1f} ms max={report['max']} ms; "
        f"earliest fired_at - due = {report['min_sent']} ms; by stage, median/max: "
        f"fired_at - due {sent[len(sent) // 2]}/{sent[-1]} ms, "
        f"received - fired_at {transit[len(transit) // 2]}/{transit[-1]} ms"
    )
    return report


async def wait_job_state(
    client: httpx.AsyncClient, biz: str, job_id: str, states: set[str], timeout_s: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = await client.get(f"/v1/jobs/{biz}/{job_id}")
        job = r.json()
        if job.get("state") in states:
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {biz}/{job_id} is {job.get('state')!r}, expected one of {states}")
