"""The token table: a revocation reaches another replica within the bound, a new token
within a second, with no store read per request; on the injected clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from tests.unit.access_harness import BOOT, IN, bearer
from tests.unit.api_harness import Api, expect
from timer_service.api.access import check_declared
from timer_service.api.token_table import MISS_REFRESH_S, REFRESH_S, STALE_LIMIT_S
from timer_service.store.faulty import faulty
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

TEAM = {"name": "team", "role": "viewer", "biz_types": [IN]}


def advance(*apis: Api, seconds: float) -> None:
    for api in apis:
        api.clock.advance(int(seconds * 1000))


async def replicas(make_api: Callable[..., Any], store: Any) -> tuple[Api, Api]:
    return await make_api(store, api_token=BOOT), await make_api(store, api_token=BOOT)


async def test_a_token_revoked_on_one_replica_is_refused_by_another_within_the_bound(
    make_api: Callable[..., Any],
) -> None:
    one, two = await replicas(make_api, recording(MemoryStore()))
    made = expect(await one.request("POST", "/v1/tokens", json=TEAM, headers=bearer(BOOT)), 201)
    secret = bearer(made["token"])
    advance(one, two, seconds=MISS_REFRESH_S)  # a new token: known after a miss refresh
    expect(await two.request("GET", "/v1/biz-types", headers=secret), 200)
    expect(await one.request("DELETE", f"/v1/tokens/{made['id']}", headers=bearer(BOOT)), 204)
    expect(await one.request("GET", "/v1/biz-types", headers=secret), 401)
    advance(one, two, seconds=REFRESH_S - 0.1)
    # Still within the refresh period: the other replica has not read the table again.
    expect(await two.request("GET", "/v1/biz-types", headers=secret), 200)
    advance(one, two, seconds=0.1)
    expect(await two.request("GET", "/v1/biz-types", headers=secret), 401)
    assert REFRESH_S + MISS_REFRESH_S <= 5, "the contract's bound is 5 s"


async def test_requests_do_not_read_the_token_table_each_time(
    make_api: Callable[..., Any],
) -> None:
    store = recording(MemoryStore())
    api = await make_api(store, api_token=BOOT)
    made = expect(await api.request("POST", "/v1/tokens", json=TEAM, headers=bearer(BOOT)), 201)
    before = store.ops["list_tokens"]
    for _ in range(50):
        expect(await api.request("GET", "/v1/biz-types", headers=bearer(made["token"])), 200)
        expect(await api.request("GET", "/v1/biz-types", headers=bearer("tmr_nobody")), 401)
    reads = store.ops["list_tokens"] - before
    assert reads <= 1, f"expected at most one table read for 100 requests, got {reads}"


async def test_a_stale_table_is_used_while_the_store_is_down_then_refused_with_503(
    make_api: Callable[..., Any],
) -> None:
    store = faulty(MemoryStore())
    api = await make_api(store, api_token=BOOT)
    made = expect(await api.request("POST", "/v1/tokens", json=TEAM, headers=bearer(BOOT)), 201)
    secret = bearer(made["token"])
    expect(await api.request("GET", "/v1/biz-types", headers=secret), 200)
    store.fail("list_tokens", times=None)
    advance(api, seconds=REFRESH_S)
    expect(await api.request("GET", "/v1/tokens/self", headers=secret), 200)
    advance(api, seconds=STALE_LIMIT_S)
    for _ in range(20):
        response = await api.request("GET", "/v1/tokens/self", headers=secret)
        expect(response, 503)
    assert response.headers["Retry-After"], response.headers
    tries = store.injected_count("list_tokens")
    assert tries == 2, f"expected one read per failed second, not per request; got {tries}"
    # The bootstrap token needs no table.
    expect(await api.request("GET", "/v1/tokens/self", headers=bearer(BOOT)), 200)


def test_an_app_with_a_v1_route_that_declares_no_role_is_refused() -> None:
    router = APIRouter(prefix="/v1")

    @router.get("/undeclared")
    async def undeclared() -> None:
        return None

    routes = [r for r in router.routes if isinstance(r, APIRoute)]
    with pytest.raises(RuntimeError, match="/v1/undeclared"):
        check_declared(routes, "/v1")
