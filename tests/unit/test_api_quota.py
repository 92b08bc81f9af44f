"""The per-biz-type registration quota over HTTP: stored on the biz type, 429 + Retry-After
when used up (single and batch creates), nothing written by a refused request."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api_harness import Api, expect


def job(n: int, biz_type: str = "orders") -> dict[str, Any]:
    return {"biz_type": biz_type, "job_id": f"j{n}", "delay_ms": 60_000}


async def test_the_quota_is_stored_and_shown_on_the_biz_type(api: Api) -> None:
    body = expect(await api.put_biz(registration_rate_per_s=2.5, registration_burst=10), 200)
    assert (body["registration_rate_per_s"], body["registration_burst"]) == (2.5, 10), body
    shown = expect(await api.request("GET", "/v1/biz-types/orders"), 200)
    assert (shown["registration_rate_per_s"], shown["registration_burst"]) == (2.5, 10), shown
    defaulted = expect(await api.put_biz(registration_rate_per_s=2.5), 200)
    assert defaulted["registration_burst"] == 3, f"expected ceil(2.5) = 3, got {defaulted}"
    lifted = expect(await api.put_biz(), 200)
    assert (lifted["registration_rate_per_s"], lifted["registration_burst"]) == (None, None)


@pytest.mark.parametrize(
    "config",
    [
        {"registration_rate_per_s": 0},
        {"registration_rate_per_s": -1},
        {"registration_rate_per_s": 10_000.5},
        {"registration_rate_per_s": 5.124586875089629e307},  # was a 500 (schemathesis)
        {"registration_rate_per_s": "fast"},
        {"registration_burst": 0},
        {"registration_burst": 1.5},
        {"registration_burst": 10_001},
    ],
)
async def test_a_bad_quota_is_422_and_changes_nothing(api: Api, config: dict[str, Any]) -> None:
    before = await api.snapshot()
    problem = expect(await api.put_biz(**config), 422)
    [field] = config
    assert problem["errors"][0]["loc"][-1] == field, problem
    assert await api.snapshot() == before


async def test_over_the_quota_a_create_is_429_with_retry_after(api: Api) -> None:
    expect(await api.put_biz(registration_rate_per_s=1, registration_burst=2), 200)
    expect(await api.create(**job(1)), 201)
    expect(await api.create(**job(2)), 201)
    refused = await api.create(**job(3))
    problem = expect(refused, 429)
    assert problem["type"] == "/problems/over-quota", problem
    assert refused.headers["retry-after"] == "1", refused.headers
    expect(await api.request("GET", "/v1/jobs/orders/j3"), 404)
    over = api.metrics.registry.get_sample_value(
        "timer_registrations_over_quota_total", {"biz_type": "orders"}
    )
    assert over == 1, f"expected 1 create counted over quota, got {over}"
    api.clock.advance(1000)
    expect(await api.create(**job(3)), 201)


async def test_a_batch_over_the_quota_is_refused_whole(api: Api) -> None:
    expect(await api.put_biz(registration_rate_per_s=10, registration_burst=5), 200)
    expect(await api.put_biz("other"), 201)
    expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": [job(0)] * 5}), 200)
    batch = {"jobs": [job(10, "other"), job(11)]}
    before = await api.snapshot()
    refused = await api.request("POST", "/v1/jobs:batch", json=batch)
    expect(refused, 429)
    assert int(refused.headers["retry-after"]) >= 1, refused.headers
    assert await api.snapshot() == before, "a refused batch wrote something"
    api.clock.advance(100)  # 10/s: one token
    results = expect(await api.request("POST", "/v1/jobs:batch", json=batch), 200)["results"]
    assert [r["status"] for r in results] == [201, 201], results


async def test_unlimited_biz_types_and_other_biz_types_are_not_held_back(api: Api) -> None:
    expect(await api.put_biz("slow", registration_rate_per_s=1, registration_burst=1), 201)
    expect(await api.create(**job(1, "slow")), 201)
    expect(await api.create(**job(2, "slow")), 429)
    for n in range(20):
        expect(await api.create(**job(n)), 201)
