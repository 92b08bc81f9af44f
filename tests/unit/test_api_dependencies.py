"""No request runs a route dependency in FastAPI's thread pool: a sync dependency is
called there, a thread hop per request (and per dependency) for what is a read of the
request or of the app's state, so every dependency the app declares is async."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastapi.dependencies.utils
import pytest

from tests.unit.access_harness import BOOT, IN, sample, secret_of, seeded, send, v1_routes
from timer_service.access import Role


async def test_no_route_runs_a_dependency_in_the_thread_pool(
    make_api: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    api = await seeded(make_api)
    ran: list[str] = []
    real = fastapi.dependencies.utils.run_in_threadpool

    async def recording(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ran.append(getattr(func, "__qualname__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(fastapi.dependencies.utils, "run_in_threadpool", recording)
    answered = []
    for route in v1_routes():
        response = await send(api, sample(route, IN), secret_of(Role.ADMIN, scoped=False))
        answered.append(response.status_code)
    for path in ("/healthz", "/readyz", "/v1/tokens/self"):
        answered.append(
            (
                await api.request("GET", path, headers={"Authorization": f"Bearer {BOOT}"})
            ).status_code
        )
    assert len(answered) > 20 and all(status < 500 for status in answered), answered
    assert ran == [], f"dependencies run in the thread pool: {sorted(set(ran))}"
