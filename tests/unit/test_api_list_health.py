"""The REST API over the in-memory store: listing jobs, health, readiness, metrics and
the OpenAPI schema (docs/api.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.api_harness import Api, expect, locs

# -- list ------------------------------------------------------------------------


async def test_list_pages_and_filters(api: Api) -> None:
    expect(await api.put_biz("billing"), 201)
    for i in range(5):
        expect(await api.create(biz_type="orders", job_id=f"o{i}", delay_ms=1000), 201)
    expect(await api.create(biz_type="billing", job_id="b0", delay_ms=1000), 201)
    expect(await api.request("DELETE", "/v1/jobs/orders/o3"), 200)

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"biz_type": "orders", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = expect(await api.request("GET", "/v1/jobs", params=params), 200)
        assert len(page["items"]) <= 2
        seen += [job["job_id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["o0", "o1", "o2", "o3", "o4"], seen

    everything = expect(await api.request("GET", "/v1/jobs"), 200)
    assert len(everything["items"]) == 6 and everything["next_cursor"] is None, everything
    cancelled = expect(await api.request("GET", "/v1/jobs", params={"state": "cancelled"}), 200)
    assert [j["job_id"] for j in cancelled["items"]] == ["o3"], cancelled
    full = expect(await api.request("GET", "/v1/jobs", params={"limit": 1000}), 200)
    assert len(full["items"]) == 6


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"limit": 1001}, ["query", "limit"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": "many"}, ["query", "limit"]),
        ({"state": "done"}, ["query", "state"]),
        ({"biz_type": "Bad!"}, ["query", "biz_type"]),
    ],
)
async def test_list_rejects_bad_query(api: Api, params: dict[str, Any], loc: list[Any]) -> None:
    problem = expect(await api.request("GET", "/v1/jobs", params=params), 422)
    assert loc in locs(problem), locs(problem)


# -- health and metrics -------------------------------------------------------------


async def test_health_ready_metrics(api: Api) -> None:
    assert expect(await api.request("GET", "/healthz"), 200) == {"status": "ok"}
    assert expect(await api.request("GET", "/readyz"), 200) == {"status": "ok"}
    expect(await api.create(biz_type="orders", job_id="m", delay_ms=1), 201)
    response = await api.request("GET", "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'timer_jobs_created_total{biz_type="orders"} 1.0' in response.text, response.text


async def test_readyz_fails_when_a_check_fails(make_api: Callable[..., Any]) -> None:
    async def broken() -> None:
        raise ConnectionError("queue down")

    api = await make_api(ready_checks=[broken])
    problem = expect(await api.request("GET", "/readyz"), 503)
    # What broke goes to the log; the answer names no internals (an unauthenticated
    # endpoint must not show driver text).
    assert "queue down" not in problem["detail"] and "queue" in problem["detail"], problem


async def test_readyz_fails_when_the_store_does_not_answer(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    await api.store.close()
    expect(await api.request("GET", "/readyz"), 503)
    assert expect(await api.request("GET", "/healthz"), 200) == {"status": "ok"}


async def test_openapi_schema_is_complete(api: Api) -> None:
    schema = expect(await api.request("GET", "/openapi.json"), 200)
    text = json.dumps(schema)
    defined = set(schema["components"]["schemas"])
    referenced = set(re.findall(r"#/components/schemas/([^\"]+)", text))
    assert referenced <= defined, f"dangling refs: {referenced - defined}"
    create = schema["paths"]["/v1/jobs"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]
    for status in ("200", "201", "409", "413", "422"):
        assert status in create["responses"], f"{status} not declared: {create['responses']}"
    assert "application/problem+json" in create["responses"]["422"]["content"]
    assert "put" in schema["paths"]["/v1/schedules/{biz_type}/{schedule_id}"]
    docs = await api.request("GET", "/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
