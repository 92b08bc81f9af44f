"""Every /v1 route of the app, by every role, for a biz type inside and outside the token's
scope: allowed (a 2xx or a domain error) exactly when the route's declared role and biz
types allow it, else 403 changing nothing; no token or an unknown one: 401. The cases
are generated from the app's routes, not listed by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.routing import APIRoute

from tests.unit.access_harness import (
    BODIES,
    IN,
    OUT,
    ROLES,
    declared,
    route_id,
    sample,
    secret_of,
    seeded,
    send,
    state_of,
    v1_routes,
)
from tests.unit.api_harness import expect
from timer_service.access import Role

ROUTES = v1_routes()
# The contract's roles (CONTRACT "Access control"), pinned per route.
EXPECTED_ROLES = {
    "POST /v1/jobs": Role.PRODUCER,
    "POST /v1/jobs:batch": Role.PRODUCER,
    "GET /v1/jobs": Role.VIEWER,
    "GET /v1/jobs/{biz_type}/{job_id}": Role.VIEWER,
    "DELETE /v1/jobs/{biz_type}/{job_id}": Role.PRODUCER,
    "PATCH /v1/jobs/{biz_type}/{job_id}": Role.PRODUCER,
    "POST /v1/jobs/{biz_type}/{job_id}/replay": Role.OPERATOR,
    "PUT /v1/biz-types/{biz_type}": Role.OPERATOR,
    "PATCH /v1/biz-types/{biz_type}": Role.OPERATOR,
    "POST /v1/biz-types/{biz_type}/secret:rotate": Role.OPERATOR,
    "GET /v1/biz-types": Role.VIEWER,
    "GET /v1/biz-types/{biz_type}": Role.VIEWER,
    "DELETE /v1/biz-types/{biz_type}": Role.ADMIN,
    "GET /v1/biz-types/{biz_type}/stats": Role.VIEWER,
    "GET /v1/biz-types/{biz_type}/series": Role.VIEWER,
    "POST /v1/jobs:bulk-cancel": Role.OPERATOR,
    "POST /v1/jobs:bulk-replay": Role.OPERATOR,
    "GET /v1/audit": Role.VIEWER,
    "GET /v1/stats": Role.VIEWER,
    "GET /v1/calendar": Role.VIEWER,
    "GET /v1/servers": Role.VIEWER,
    "PUT /v1/schedules/{biz_type}/{schedule_id}": Role.PRODUCER,
    "POST /v1/schedules/{biz_type}/{schedule_id}/run-now": Role.PRODUCER,
    "POST /v1/schedules/{biz_type}/{schedule_id}/skip-next": Role.PRODUCER,
    "GET /v1/schedules": Role.VIEWER,
    "GET /v1/schedules/{biz_type}/{schedule_id}": Role.VIEWER,
    "DELETE /v1/schedules/{biz_type}/{schedule_id}": Role.PRODUCER,
    "POST /v1/tokens": Role.ADMIN,
    "GET /v1/tokens": Role.ADMIN,
    "DELETE /v1/tokens/{token_id}": Role.ADMIN,
    "GET /v1/tokens/self": Role.VIEWER,
}


def test_every_v1_route_declares_the_contracts_role() -> None:
    declared_roles = {route_id(r): declared(r).role for r in ROUTES}
    assert declared_roles == EXPECTED_ROLES, f"declared {declared_roles}"


BODYLESS_POSTS = {
    "POST /v1/jobs/{biz_type}/{job_id}/replay",
    "POST /v1/schedules/{biz_type}/{schedule_id}/run-now",
    "POST /v1/schedules/{biz_type}/{schedule_id}/skip-next",
}


def test_every_route_that_reads_a_body_has_a_sample() -> None:
    reading = {route_id(r) for r in ROUTES if r.methods & {"POST", "PUT", "PATCH"}}
    missing = reading - set(BODIES) - BODYLESS_POSTS
    assert not missing, f"routes with a body and no sample in BODIES: {missing}"


def expected_allowed(route: APIRoute, role: Role, scoped: bool, biz: str) -> bool:
    requirement = declared(route)
    if not role.includes(requirement.role):
        return False
    if requirement.every_biz_type and scoped:
        return False
    return requirement.biz_from == "none" or not scoped or biz == IN


CASES = [
    pytest.param(route, role, scoped, biz, id=f"{route_id(route)}-{role.value}-{tag}")
    for route in ROUTES
    for role, scoped in [*((r, True) for r in ROLES), (Role.ADMIN, False)]
    for biz, tag in ((IN, "in"), (OUT, "out"))
    if scoped or biz == IN
    for tag in [tag if scoped else "all"]
]


@pytest.mark.parametrize(("route", "role", "scoped", "biz"), CASES)
async def test_a_route_answers_by_role_and_biz_types(
    make_api: Callable[..., Any], route: APIRoute, role: Role, scoped: bool, biz: str
) -> None:
    api = await seeded(make_api)
    request = sample(route, biz)
    before = await state_of(api)
    response = await send(api, request, secret_of(role, scoped))
    if expected_allowed(route, role, scoped, biz):
        assert response.status_code not in (401, 403) and response.status_code < 500, (
            f"{request}: expected it allowed, got {response.status_code}: {response.text}"
        )
    else:
        problem = expect(response, 403)
        assert problem["type"].endswith("/forbidden"), problem
        assert await state_of(api) == before, f"{request}: a 403 changed something"


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
@pytest.mark.parametrize("secret", [None, "tmr_unknown", "tok-boot-x"])
async def test_no_token_or_an_unknown_one_is_401_on_every_route(
    make_api: Callable[..., Any], route: APIRoute, secret: str | None
) -> None:
    api = await seeded(make_api)
    expect(await send(api, sample(route, IN), secret), 401)
