"""A business team's own receiving app for the e2e tests: FastAPI with the SDK's
`CallbackVerifier` (two secrets, as during a rotation), served by uvicorn in the test's
loop; the `business_app` fixture."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from fastapi import Depends, FastAPI, Request, Response

from tests.support import free_port
from timer_service.receiver import Callback, CallbackVerifier

OLD_SECRET = "old-secret-rotating-out"
NEW_SECRET = "new-secret-rotating-in"


@dataclass
class BusinessApp:
    """A FastAPI app as a business team writes it, served by uvicorn in the test's loop."""

    port: int = field(default_factory=free_port)
    received: dict[tuple[str, str], list[Callback]] = field(
        default_factory=lambda: defaultdict(list)
    )
    raw: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def build(self) -> FastAPI:
        app = FastAPI()
        verifier = CallbackVerifier([OLD_SECRET, NEW_SECRET])

        @app.post("/callback")
        async def on_timer(request: Request, cb: Callback = Depends(verifier)) -> dict[str, bool]:
            self.received[(cb.biz_type, cb.job_id)].append(cb)
            self.raw.append((await request.body(), dict(request.headers)))
            return {"ok": True}

        @app.post("/reject")
        async def reject(request: Request) -> Response:
            self.rejected.append(json.loads(await request.body())["job_id"])
            return Response(status_code=400)

        return app

    async def start(self) -> None:
        config = uvicorn.Config(
            self.build(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        deadline = time.monotonic() + 10
        while not self.server.started:
            if self.task.done():
                self.task.result()
            assert time.monotonic() < deadline, "uvicorn did not start within 10 s"
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self.task, 10)

    async def wait_for(self, keys: set[tuple[str, str]], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if keys <= self.received.keys():
                return
            await asyncio.sleep(0.1)
        missing = sorted(keys - self.received.keys())
        raise AssertionError(
            f"expected {len(keys)} callbacks, got {len(keys) - len(missing)}; "
            f"{len(missing)} never arrived, e.g. {missing[:5]}"
        )


@pytest.fixture
async def business_app() -> AsyncIterator[BusinessApp]:
    app = BusinessApp()
    await app.start()
    yield app
    await app.stop()
