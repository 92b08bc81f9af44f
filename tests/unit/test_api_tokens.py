"""/v1/tokens: create (secret shown once, hash kept), list, use, revoke; 409 while the API
is open; 422 on bad bodies; what each token sees and is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.access_harness import BOOT, IN, OUT, bearer, secret_of, seeded
from tests.unit.api_harness import CALLBACK, Api, expect
from timer_service.access import Role, hash_token

ORDERS_TEAM = {"name": "orders-team", "role": "producer", "biz_types": [IN, "refund-*"]}


async def create(api: Api, body: Any, status: int = 201) -> Any:
    return expect(await api.request("POST", "/v1/tokens", json=body, headers=bearer(BOOT)), status)


async def test_a_token_is_shown_once_kept_as_a_hash_used_then_revoked(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    made = await create(api, ORDERS_TEAM)
    assert made.keys() == {"id", "name", "role", "biz_types", "created_at", "token"}, made
    assert made["token"].startswith("tmr_") and len(made["token"]) >= 40, made["token"]
    assert {k: made[k] for k in ORDERS_TEAM} == ORDERS_TEAM, made
    assert made["created_at"] == api.clock.now_ms(), made
    [stored] = [t for t in await api.store.tokens.list_tokens() if t.id == made["id"]]
    assert stored.token_hash == hash_token(made["token"]), "the store keeps the hash"

    listed = expect(await api.request("GET", "/v1/tokens", headers=bearer(BOOT)), 200)
    mine = [t for t in listed["items"] if t["id"] == made["id"]]
    assert mine == [{k: v for k, v in made.items() if k != "token"}], listed
    assert "tmr_" not in str(listed), "a listing shows no secret"

    secret = bearer(made["token"])
    job = {"biz_type": IN, "job_id": "by-team", "delay_ms": 1000}
    expect(await api.request("POST", "/v1/jobs", json=job, headers=secret), 201)
    expect(await api.request("DELETE", f"/v1/tokens/{made['id']}", headers=bearer(BOOT)), 204)
    # This replica refuses it at once; another within REFRESH_S (test_token_table.py).
    expect(await api.request("GET", f"/v1/jobs/{IN}/by-team", headers=secret), 401)
    expect(await api.request("DELETE", f"/v1/tokens/{made['id']}", headers=bearer(BOOT)), 404)


async def test_the_audit_log_names_the_token(make_api: Callable[..., Any]) -> None:
    api = await seeded(make_api)
    made = await create(api, {**ORDERS_TEAM, "role": "operator"})
    expect(await api.request("DELETE", f"/v1/jobs/{IN}/j1", headers=bearer(made["token"])), 200)
    page = expect(await api.request("GET", "/v1/audit", headers=bearer(BOOT)), 200)
    assert page["items"][0]["actor"] == "orders-team", page["items"][0]
    made_entry = page["items"][1]
    assert (made_entry["action"], made_entry["actor"]) == ("token.create", "default"), made_entry
    assert made_entry["detail"]["id"] == made["id"] and "tmr_" not in str(page), made_entry
    scoped = expect(await api.request("GET", "/v1/audit", headers=bearer(made["token"])), 200)
    assert "token.create" not in str(scoped), "token entries are for admins of every biz type"


async def test_creating_a_token_while_the_api_is_open_is_409(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api()
    body = expect(await api.request("POST", "/v1/tokens", json=ORDERS_TEAM), 409)
    assert "TIMER_API_TOKEN" in body["detail"], body
    assert await api.store.tokens.list_tokens() == []
    me = expect(await api.request("GET", "/v1/tokens/self"), 200)
    assert me == {"name": "anonymous", "role": "admin", "biz_types": [], "auth": False}, me


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "viewer", "biz_types": [IN]}, "name"),
        ({"name": "x", "role": "root", "biz_types": [IN]}, "role"),
        ({"name": "x", "role": "viewer"}, "biz_types"),
        ({"name": "x", "role": "operator", "biz_types": []}, "biz_types"),
        ({"name": "x", "role": "viewer", "biz_types": ["Orders"]}, "biz_types"),
        ({"name": "x", "role": "viewer", "biz_types": ["a*b"]}, "biz_types"),
        ({"name": "x", "role": "viewer", "biz_types": ["**"]}, "biz_types"),
        ({"name": "x", "role": "viewer", "biz_types": [7]}, "biz_types"),
        ({"name": "", "role": "viewer", "biz_types": [IN]}, "name"),
        ({"name": " padded", "role": "viewer", "biz_types": [IN]}, "name"),
        ({"name": "line\nbreak", "role": "viewer", "biz_types": [IN]}, "name"),
        ({"name": "x", "role": "viewer", "biz_types": [IN], "token": "mine"}, "token"),
    ],
)
async def test_a_bad_token_body_is_422_naming_the_field_and_creates_nothing(
    make_api: Callable[..., Any], body: dict[str, Any], field: str
) -> None:
    api = await make_api(api_token=BOOT)
    problem = await create(api, body, 422)
    assert any(field in map(str, e["loc"]) or field in e["msg"] for e in problem["errors"]), (
        f"expected an error about {field!r}, got {problem['errors']}"
    )
    assert await api.store.tokens.list_tokens() == []


async def test_an_admin_token_needs_no_biz_types_and_prefixes_match(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    admin = await create(api, {"name": "platform", "role": "admin"})
    assert admin["biz_types"] == [], admin
    viewer = await create(api, {"name": "v", "role": "viewer", "biz_types": ["team-a-*"]})
    expect(await api.request("GET", f"/v1/biz-types/{IN}", headers=bearer(viewer["token"])), 200)
    expect(await api.request("GET", f"/v1/biz-types/{OUT}", headers=bearer(viewer["token"])), 403)


async def test_a_listing_without_a_filter_shows_only_the_tokens_biz_types(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    viewer = bearer(secret_of(Role.VIEWER))
    for path in ("/v1/jobs", "/v1/biz-types", "/v1/schedules", "/v1/audit"):
        page = expect(await api.request("GET", path, headers=viewer), 200)
        seen = {item["biz_type"] for item in page["items"]}
        assert seen == {IN}, f"{path}: expected only {IN}, got {seen}"
        everything = expect(await api.request("GET", path, headers=bearer(BOOT)), 200)
        assert {item["biz_type"] for item in everything["items"]} == {IN, OUT}, path
    stats = expect(await api.request("GET", "/v1/stats", headers=viewer), 200)
    assert [item["biz_type"] for item in stats["items"]] == [IN], stats
    problem = expect(await api.request("GET", f"/v1/jobs?biz_type={OUT}", headers=viewer), 403)
    assert problem["type"].endswith("/forbidden"), problem


async def test_an_operator_replaces_a_biz_type_but_only_an_admin_creates_one(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    operator = bearer(secret_of(Role.OPERATOR))
    new = "team-a-new"
    expect(await api.request("PUT", f"/v1/biz-types/{new}", json=CALLBACK, headers=operator), 403)
    assert await api.store.biz_types.get_biz_type(new) is None
    admin = bearer(secret_of(Role.ADMIN))
    expect(await api.request("PUT", f"/v1/biz-types/{new}", json=CALLBACK, headers=admin), 201)
    expect(await api.request("PUT", f"/v1/biz-types/{new}", json=CALLBACK, headers=operator), 200)
    expect(await api.request("DELETE", f"/v1/biz-types/{new}", headers=operator), 403)


async def test_a_batch_with_one_item_outside_the_tokens_biz_types_is_refused_whole(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    producer = bearer(secret_of(Role.PRODUCER))
    jobs = [{"biz_type": IN, "job_id": "b1", "delay_ms": 1}, {"biz_type": OUT, "delay_ms": 1}]
    before = await api.snapshot()
    body = {"jobs": jobs}
    expect(await api.request("POST", "/v1/jobs:batch", json=body, headers=producer), 403)
    assert await api.snapshot() == before, "a refused batch wrote nothing"
    body = {"jobs": jobs[:1]}
    got = expect(await api.request("POST", "/v1/jobs:batch", json=body, headers=producer), 200)
    assert [r["status"] for r in got["results"]] == [201], got


async def test_only_an_admin_of_every_biz_type_manages_tokens(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    scoped_admin = bearer(secret_of(Role.ADMIN))
    problem = expect(
        await api.request("POST", "/v1/tokens", json=ORDERS_TEAM, headers=scoped_admin), 403
    )
    assert problem["type"].endswith("/forbidden"), problem
    full_admin = bearer(secret_of(Role.ADMIN, scoped=False))
    expect(await api.request("POST", "/v1/tokens", json=ORDERS_TEAM, headers=full_admin), 201)


async def test_whoami_tells_a_token_its_role_and_biz_types(make_api: Callable[..., Any]) -> None:
    api = await seeded(make_api)
    me = expect(
        await api.request("GET", "/v1/tokens/self", headers=bearer(secret_of(Role.PRODUCER))),
        200,
    )
    assert me == {
        "name": "test-producer", "role": "producer", "biz_types": ["team-a-*"], "auth": True,
    }, me  # fmt: skip


async def test_the_forbidden_problem_type_is_described(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    got = expect(await api.request("GET", "/problems/forbidden"), 200)
    assert "role" in str(got), got


async def test_the_openapi_documents_401_and_403_on_every_v1_operation(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api(api_token=BOOT)
    schema = expect(await api.request("GET", "/openapi.json"), 200)
    v1 = {path: ops for path, ops in schema["paths"].items() if path.startswith("/v1")}
    assert {"/v1/tokens", "/v1/tokens/{token_id}", "/v1/tokens/self"} <= v1.keys(), v1.keys()
    for path, ops in v1.items():
        for method, op in ops.items():
            missing = {"401", "403"} - op["responses"].keys()
            assert not missing, f"{method.upper()} {path} does not document {missing}"
