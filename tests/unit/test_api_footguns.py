"""Issue 31.6, the API's footguns: an unknown query parameter is a 422 naming it (not
ignored), and every operation the admission gate or a quota can refuse documents its
503 / 429 with `Retry-After` in the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api_harness import Api, expect, locs, new_app
from timer_service.api.query_params import UNKNOWN_QUERY
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.store.memory import MemoryStore


def openapi() -> dict[str, Any]:
    store = MemoryStore(buckets=60, retention_ms=86_400_000)
    app = new_app(store, Metrics(), FakeClock())
    return app.openapi()


SCHEMA = openapi()
OPERATIONS = [
    (method.upper(), path, operation)
    for path, item in SCHEMA["paths"].items()
    for method, operation in item.items()
]
WITH_QUERY = [
    (method, path, sorted(p["name"] for p in op.get("parameters", []) if p["in"] == "query"))
    for method, path, op in OPERATIONS
    if any(p["in"] == "query" for p in op.get("parameters", []))
]


def test_the_operations_with_query_parameters_are_found() -> None:
    found = {f"{method} {path}" for method, path, _ in WITH_QUERY}
    assert {"GET /v1/jobs", "GET /v1/audit", "GET /v1/schedules"} <= found, found


@pytest.mark.parametrize(("method", "path", "known"), WITH_QUERY)
async def test_an_unknown_query_parameter_is_422_naming_it(
    api: Api, method: str, path: str, known: list[str]
) -> None:
    url = path.replace("{biz_type}", "orders").replace("{job_id}", "o-1")
    response = await api.request(method, url, params={"statee": "dead", "limti": "5"})

    problem = expect(response, 422)
    assert locs(problem) == [["query", "limti"], ["query", "statee"]], problem
    assert {e["msg"] for e in problem["errors"]} == {UNKNOWN_QUERY}
    assert "statee" not in known and "limti" not in known


async def test_a_misspelt_filter_no_longer_lists_everything(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)

    problem = expect(await api.request("GET", "/v1/jobs?statee=dead"), 422)

    assert "statee" in problem["detail"] or ["query", "statee"] in locs(problem), problem
    listed = expect(await api.request("GET", "/v1/jobs?state=dead&biz_type=orders"), 200)
    assert listed["items"] == [], "the known filter still filters"


async def test_an_operation_without_query_parameters_ignores_them(api: Api) -> None:
    """Caches and probes may add a parameter to a plain read (`?_=<time>`)."""
    body = expect(await api.request("GET", "/v1/biz-types/orders?_=1767225600000"), 200)

    assert body["biz_type"] == "orders"


def retry_after_documented(response: dict[str, Any]) -> bool:
    return response.get("headers", {}).get("Retry-After", {}).get("schema", {}).get(
        "type"
    ) == "integer" and "application/problem+json" in response.get("content", {})


@pytest.mark.parametrize(
    ("method", "path"), [(m, p) for m, p, _ in OPERATIONS if p.startswith("/v1/")]
)
def test_every_gated_operation_documents_503_with_retry_after(method: str, path: str) -> None:
    responses = SCHEMA["paths"][path][method.lower()]["responses"]

    assert "503" in responses, f"{method} {path}: no 503 documented"
    assert retry_after_documented(responses["503"]), responses["503"]


@pytest.mark.parametrize("operation_id", ["createJob", "createJobs"])
def test_creates_document_429_with_retry_after(operation_id: str) -> None:
    [operation] = [op for _, _, op in OPERATIONS if op["operationId"] == operation_id]

    assert retry_after_documented(operation["responses"]["429"]), operation["responses"]


def test_readyz_documents_its_retry_after() -> None:
    assert retry_after_documented(SCHEMA["paths"]["/readyz"]["get"]["responses"]["503"])


async def test_the_documented_429_is_what_an_over_quota_create_gets(api: Api) -> None:
    expect(await api.put_biz(registration_rate_per_s=1.0, registration_burst=1), 200)
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)

    response = await api.create(biz_type="orders", job_id="b", delay_ms=1000)

    expect(response, 429)
    assert int(response.headers["retry-after"]) >= 1, response.headers
