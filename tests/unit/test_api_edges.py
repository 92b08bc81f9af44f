"""The REST API: batches, malformed requests, auth, body limits and unexpected errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.unit.api_harness import NOW, Api, expect, locs
from timer_service.store.memory import MemoryStore

JSON = {"content-type": "application/json"}


# -- batch --------------------------------------------------------------------


def item(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"biz_type": "orders", "job_id": job_id, "due_at": NOW + 1000, **fields}


async def batch(api: Api, jobs: Any) -> Any:
    return await api.request("POST", "/v1/jobs:batch", json={"jobs": jobs})


async def test_batch_creates_in_one_store_call(api: Api) -> None:
    calls_before = api.store.ops["create_jobs"]
    lookups_before = api.store.ops.get("get_biz_types", 0)
    body = expect(await batch(api, [item(f"j{i}", payload=i) for i in range(1000)]), 200)
    assert [r["status"] for r in body["results"]] == [201] * 1000
    assert [r["job"]["job_id"] for r in body["results"]] == [f"j{i}" for i in range(1000)]
    assert api.store.ops["create_jobs"] - calls_before == 1, "expected one bulk create"
    if "get_biz_types" in api.store.ops:
        assert api.store.ops["get_biz_types"] - lookups_before == 1
    assert api.created_total("orders") == 1000.0
    assert api.written == [[(NOW + 1000) // 1000]], api.written


async def test_batch_mixed_results_in_request_order(api: Api) -> None:
    expect(await api.create(**item("old", payload="v1")), 201)
    jobs = [
        item("a"),  # 201
        item("old", payload="v1"),  # 200: exists, same
        item("old", payload="v2"),  # 409: exists, different
        item("bad id!"),  # 422: malformed item
        {"biz_type": "unknown", "job_id": "u", "delay_ms": 1},  # 422: unknown biz type
        item("big", payload="x" * 70_000),  # 413
        item("a"),  # 200: repeated earlier in this batch, same
        item("a", due_at=NOW + 2000),  # 409: repeated, different
        5,  # 422: not an object
        item("b", due_at=NOW, delay_ms=3),  # 422: both
        {"biz_type": "orders", "delay_ms": 0},  # 201 with a generated id
    ]
    results = expect(await batch(api, jobs), 200)["results"]
    statuses = [r["status"] for r in results]
    assert statuses == [201, 200, 409, 422, 422, 413, 200, 409, 422, 422, 201], statuses
    for r in results:
        if r["status"] in (200, 201):
            assert "job" in r and "error" not in r, r
        else:
            assert "error" in r and r["error"]["status"] == r["status"], r
            assert {"type", "title", "status", "detail"} <= r["error"].keys(), r
    assert results[3]["error"]["errors"][0]["loc"] == ["body", "jobs", 3, "job_id"], results[3]
    assert results[4]["error"]["errors"][0]["loc"] == ["body", "jobs", 4, "biz_type"]
    assert results[1]["job"]["payload"] == "v1"
    assert results[6]["job"] == results[0]["job"]
    assert api.created_total("orders") == 3.0  # "old" before, "a" and the generated one
    stored = {j["job_id"] for j in (await api.snapshot())[1]}
    assert stored == {"old", "a", results[10]["job"]["job_id"]}, stored


async def test_batch_of_only_bad_items_changes_nothing(api: Api) -> None:
    before = await api.snapshot()
    results = expect(await batch(api, [item("x y"), {"biz_type": "nope", "delay_ms": 1}]), 200)
    assert [r["status"] for r in results["results"]] == [422, 422]
    assert await api.snapshot() == before


@pytest.mark.parametrize(
    "body",
    [
        {"jobs": []},
        {"jobs": [item(f"j{i}") for i in range(1001)]},
        {"jobs": "many"},
        {},
        [item("a")],
        {"jobs": None},
    ],
)
async def test_batch_size_and_shape_rules(api: Api, body: Any) -> None:
    before = await api.snapshot()
    expect(await api.request("POST", "/v1/jobs:batch", json=body), 422)
    assert await api.snapshot() == before


# -- malformed requests -----------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"{bad json",
        b"",
        b'{"biz_type": "orders", "delay_ms": 1',
        b'{"a": "\xff\xfe"}',
        b'\xef\xbb\xbf{"biz_type": "orders", "delay_ms": 1}',
        b'{"biz_type": "orders", "delay_ms": NaN}',
        b'{"biz_type": "orders", "delay_ms": 1, "payload": Infinity}',
        b"\x00",
    ],
)
@pytest.mark.parametrize(
    "where", ["/v1/jobs", "/v1/jobs:batch", "PUT /v1/biz-types/orders", "PATCH /v1/jobs/orders/a"]
)
async def test_body_that_is_not_json_is_400(api: Api, raw: bytes, where: str) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=5000), 201)
    method, _, path = where.rpartition(" ")
    before = await api.snapshot()
    response = await api.request(
        method or "POST", path, content=raw, headers={"content-type": "application/json"}
    )
    expect(response, 400)
    assert await api.snapshot() == before


async def test_body_with_charset_or_a_json_suffix_is_read_as_json(api: Api) -> None:
    body = json.dumps({"biz_type": "orders", "job_id": "ct", "delay_ms": 1}).encode()
    headers = {"content-type": "application/json; charset=UTF-8"}
    expect(await api.request("POST", "/v1/jobs", content=body, headers=headers), 201)
    headers = {"content-type": "application/merge-patch+json"}
    expect(await api.request("POST", "/v1/jobs", content=body, headers=headers), 200)


async def test_huge_number_in_payload_is_422(api: Api) -> None:
    raw = b'{"biz_type": "orders", "job_id": "n", "delay_ms": 1, "payload": 1e400}'
    before = await api.snapshot()
    problem = expect(await api.request("POST", "/v1/jobs", content=raw, headers=JSON), 422)
    assert ["body", "payload"] in locs(problem)
    assert await api.snapshot() == before


async def test_unknown_route_404_and_wrong_method_405(api: Api) -> None:
    expect(await api.request("GET", "/v1/nothing"), 404)
    expect(await api.request("GET", "/"), 404)
    response = await api.request("PUT", "/v1/jobs")
    expect(response, 405)
    assert "GET" in response.headers.get("allow", ""), response.headers
    expect(await api.request("POST", "/healthz"), 405)


def exploding_store() -> MemoryStore:
    store = MemoryStore()

    async def get_job(biz_type: str, job_id: str) -> Any:
        raise RuntimeError("disk on fire")

    store.jobs.get_job = get_job  # type: ignore[method-assign]
    return store


async def test_unexpected_error_is_500_problem(
    make_api: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    api = await make_api(store=exploding_store())
    problem = expect(await api.request("GET", "/v1/jobs/orders/a"), 500)
    assert "disk on fire" not in problem["detail"], "internals leaked into the answer"
    assert any("disk on fire" in (r.exc_text or str(r.exc_info)) for r in caplog.records), (
        "the error was not logged"
    )


# -- auth ------------------------------------------------------------------------


@pytest.fixture
async def secured(make_api: Callable[..., Any]) -> AsyncIterator[Api]:
    api = await make_api(api_token="t0ken")
    yield api


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": "t0ken"},
        {"authorization": "Basic t0ken"},
        {"authorization": "Bearer t0ken2"},
        {"authorization": "Bearer "},
    ],
)
async def test_missing_or_wrong_token_is_401(secured: Api, headers: dict[str, str]) -> None:
    before = await secured.snapshot()
    for method, path, body in [
        ("PUT", "/v1/biz-types/orders", {"callback_url": "http://x/"}),
        ("POST", "/v1/jobs", {"biz_type": "orders", "delay_ms": 1}),
        ("GET", "/v1/jobs", None),
        ("GET", "/v1/biz-types", None),
        ("DELETE", "/v1/jobs/orders/a", None),
        ("GET", "/v1/unknown", None),
    ]:
        response = await secured.request(method, path, json=body, headers=headers)
        expect(response, 401)
        assert response.headers.get("www-authenticate", "").startswith("Bearer"), response.headers
    assert await secured.snapshot() == before


async def test_right_token_is_let_in(secured: Api) -> None:
    auth = {"authorization": "Bearer t0ken"}
    body = {"callback_url": "http://x/"}
    expect(await secured.request("PUT", "/v1/biz-types/orders", json=body, headers=auth), 201)
    expect(
        await secured.request("GET", "/v1/biz-types", headers={"Authorization": "bearer t0ken"}),
        200,
    )


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"])
async def test_ops_endpoints_are_outside_auth(secured: Api, path: str) -> None:
    assert (await secured.request("GET", path)).status_code == 200


# -- body size ---------------------------------------------------------------------


async def test_body_over_limit_is_413_from_content_length(make_api: Callable[..., Any]) -> None:
    api = await make_api(max_body_bytes=2048)
    expect(await api.put_biz(), 201)
    before = await api.snapshot()
    body = json.dumps({"biz_type": "orders", "delay_ms": 1, "payload": "x" * 3000}).encode()
    expect(await api.request("POST", "/v1/jobs", content=body, headers=JSON), 413)
    assert await api.snapshot() == before


async def test_content_length_alone_is_enough_to_refuse(make_api: Callable[..., Any]) -> None:
    api = await make_api(max_body_bytes=2048)
    reads = 0

    async def never_sent() -> AsyncIterator[bytes]:
        nonlocal reads
        reads += 1
        yield b"{}"

    # A lying Content-Length: the app must answer before reading anything.
    headers = {**JSON, "content-length": "999999999"}
    response = await api.request("POST", "/v1/jobs", content=never_sent(), headers=headers)
    expect(response, 413)


async def test_chunked_body_over_limit_is_413(make_api: Callable[..., Any]) -> None:
    api = await make_api(max_body_bytes=2048)
    expect(await api.put_biz(), 201)
    before = await api.snapshot()
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"biz_type": "orders", "delay_ms": 1, "payload": "'
        for _ in range(1000):
            sent += 1
            yield b"x" * 1000
        yield b'"}'

    response = await api.request("POST", "/v1/jobs", content=chunks(), headers=JSON)
    assert "content-length" not in response.request.headers
    expect(response, 413)
    assert await api.snapshot() == before


async def test_chunked_body_under_limit_is_accepted(make_api: Callable[..., Any]) -> None:
    api = await make_api(max_body_bytes=2048)
    expect(await api.put_biz(), 201)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"biz_type": "orders", '
        yield b'"job_id": "c", "delay_ms": 1}'

    expect(await api.request("POST", "/v1/jobs", content=chunks(), headers=JSON), 201)
