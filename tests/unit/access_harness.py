"""What the access tests share: an API with a bootstrap token, a token per role limited
to the `team-a-*` biz types, and a sample request for every /v1 route of the app."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute

from tests.unit.api_harness import CALLBACK, Api, expect, new_app
from timer_service.access import AccessToken, Role, hash_token
from timer_service.api.access import Requirement, requirement_of
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

BOOT = "tok-boot"
IN, OUT = "team-a-orders", "team-b-orders"  # inside and outside every test token's scope
SCOPE = ("team-a-*",)
ROLES = tuple(Role)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def secret_of(role: Role, scoped: bool = True) -> str:
    return f"tmr_test-{role.value}-{'scoped' if scoped else 'all'}"


async def seeded(make_api: Callable[..., Any]) -> Api:
    """An API whose auth is on, with biz types IN and OUT, a job and a schedule in each,
    and a token per role limited to SCOPE (plus an admin of every biz type).

    The data is written through the API once per process and kept as a template; each
    call gets its own deep copy of that store under a new app, so a test changes only
    its copy (the access matrix alone asks for ~360 of them)."""
    if not _TEMPLATE:
        _TEMPLATE.append(await _seed(await make_api(api_token=BOOT)))
    return await make_api(store=recording(copy.deepcopy(_TEMPLATE[0])), api_token=BOOT)


_TEMPLATE: list[MemoryStore] = []  # the seeded store, never served itself


async def _seed(api: Api) -> MemoryStore:
    boot = bearer(BOOT)
    for biz in (IN, OUT):
        expect(await api.request("PUT", f"/v1/biz-types/{biz}", json=CALLBACK, headers=boot), 201)
        job = {"biz_type": biz, "job_id": "j1", "delay_ms": 60_000}
        expect(await api.request("POST", "/v1/jobs", json=job, headers=boot), 201)
        sched = {"intervals_ms": [60_000]}
        url = f"/v1/schedules/{biz}/s1"
        expect(await api.request("PUT", url, json=sched, headers=boot), 201)
    grants = [(role, SCOPE) for role in ROLES] + [(Role.ADMIN, ())]
    for i, (role, biz_types) in enumerate(grants):
        secret = secret_of(role, scoped=bool(biz_types))
        token = AccessToken(
            f"tok_{i}", f"test-{role.value}", role, biz_types, i, hash_token(secret)
        )
        await api.store.tokens.create_token(token)
    return copy.deepcopy(api.store.inner)


def v1_routes() -> list[APIRoute]:
    """Every /v1 route of the app as `create_app` builds it."""
    app = new_app(MemoryStore(), Metrics(), FakeClock(), {"api_token": BOOT})
    routes: list[APIRoute] = app.state.api_routes
    return [r for r in routes if r.path.startswith("/v1")]


def route_id(route: APIRoute) -> str:
    [method] = route.methods or ()
    return f"{method} {route.path}"


def declared(route: APIRoute) -> Requirement:
    requirement = requirement_of(route)
    assert requirement is not None, f"{route_id(route)} declares no role"
    return requirement


# Sample bodies for the routes that read one, by route: `{biz}` is the biz type tried.
BODIES: dict[str, Callable[[str], Any]] = {
    "POST /v1/jobs": lambda biz: {"biz_type": biz, "job_id": "m1", "delay_ms": 60_000},
    "POST /v1/jobs:batch": lambda biz: {"jobs": [{"biz_type": biz, "delay_ms": 60_000}]},
    "PATCH /v1/jobs/{biz_type}/{job_id}": lambda biz: {"delay_ms": 120_000},
    "PUT /v1/biz-types/{biz_type}": lambda biz: CALLBACK,
    "PATCH /v1/biz-types/{biz_type}": lambda biz: {"paused": True},
    "POST /v1/biz-types/{biz_type}/secret:rotate": lambda biz: {},
    "POST /v1/jobs:bulk-cancel": lambda biz: {"filter": {"biz_type": biz}},
    "POST /v1/jobs:bulk-replay": lambda biz: {"filter": {"biz_type": biz}},
    "PUT /v1/schedules/{biz_type}/{schedule_id}": lambda biz: {"intervals_ms": [30_000]},
    "POST /v1/tokens": lambda biz: {"name": "new", "role": "viewer", "biz_types": [biz]},
}
PATH_VALUES = {"job_id": "j1", "schedule_id": "s1", "token_id": "tok_0"}


@dataclass(frozen=True)
class Sample:
    method: str
    url: str
    body: Any


def sample(route: APIRoute, biz: str) -> Sample:
    """A request to `route` about biz type `biz` (in its path, its filter or its body)."""
    [method] = route.methods or ()
    values = {**PATH_VALUES, "biz_type": biz}
    url = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], route.path)
    if declared(route).biz_from == "query":
        url += f"?biz_type={biz}"
    body_of = BODIES.get(route_id(route))
    return Sample(method, url, None if body_of is None else body_of(biz))


async def send(api: Api, s: Sample, secret: str | None) -> Any:
    headers = {} if secret is None else bearer(secret)
    kw: dict[str, Any] = {"headers": headers}
    if s.body is not None:
        kw["json"] = s.body
    return await api.request(s.method, s.url, **kw)


async def state_of(api: Api) -> Any:
    """Everything a refused request must leave as it was."""
    tokens = [t.to_public() for t in await api.store.tokens.list_tokens()]
    schedules = await api.request("GET", "/v1/schedules", headers=bearer(BOOT))
    return await api.snapshot(), tokens, schedules.json()
