"""The load calendar and flexible windows over the API (in-memory store): counts per
step, the parameters it refuses, and where flexible jobs land."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.access_harness import BOOT, IN, OUT, bearer, secret_of, seeded
from tests.unit.api_harness import NOW, Api, expect
from timer_service.access import Role

DUE = NOW + 60_000  # a whole second


def body(job_id: str = "j1", **fields: Any) -> dict[str, Any]:
    return {"biz_type": "orders", "job_id": job_id, "due_at": DUE, **fields}


async def calendar(api: Api, **params: Any) -> dict[str, Any]:
    query = {"from": DUE, "to": DUE + 180_000, "step_ms": 60_000, **params}
    return expect(await api.request("GET", "/v1/calendar", params=query), 200)


async def test_counts_per_step_and_per_biz_type(api: Api) -> None:
    expect(await api.put_biz("payments"), 201)
    for i, offset in enumerate((0, 1000, 59_999, 60_000, 150_000)):
        expect(await api.create(**body(f"o{i}", due_at=DUE + offset)), 201)
    expect(await api.create(biz_type="payments", job_id="p", due_at=DUE), 201)
    got = await calendar(api)
    assert got == {
        "step_ms": 60_000,
        "buckets": [
            {"at": DUE, "due": 4},
            {"at": DUE + 60_000, "due": 1},
            {"at": DUE + 120_000, "due": 1},
        ],
    }, got
    orders = await calendar(api, biz_type="orders")
    assert [b["due"] for b in orders["buckets"]] == [3, 1, 1], orders
    expect(await api.request("DELETE", "/v1/jobs/orders/o0"), 200)
    assert [b["due"] for b in (await calendar(api))["buckets"]] == [3, 1, 1]


async def test_from_and_to_are_taken_to_whole_seconds_and_the_last_step_is_short(
    api: Api,
) -> None:
    expect(await api.create(**body("a", due_at=DUE + 2500)), 201)
    got = await calendar(api, **{"from": DUE + 400, "to": DUE + 4001, "step_ms": 2000})
    assert got["buckets"] == [
        {"at": DUE, "due": 0},
        {"at": DUE + 2000, "due": 1},
        {"at": DUE + 4000, "due": 0},
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"step_ms": 1500}, "step_ms"),
        ({"step_ms": 999}, "step_ms"),
        ({"to": DUE}, "to"),
        ({"to": DUE + 2001 * 60_000}, "step_ms"),
        ({"from": "soon"}, "from"),
        ({"biz_type": "Bad!"}, "biz_type"),
    ],
)
async def test_bad_parameters_are_refused(api: Api, params: dict[str, Any], field: str) -> None:
    query = {"from": DUE, "to": DUE + 60_000, "step_ms": 1000, **params}
    problem = expect(await api.request("GET", "/v1/calendar", params=query), 422)
    assert field in str(problem), problem


async def test_a_herd_with_a_window_spreads_over_it_evenly(api: Api) -> None:
    jobs = [body(f"h{i}", window_ms=9_999) for i in range(100)]
    answer = expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": jobs}), 200)
    fires = Counter(r["job"]["fire_at"] for r in answer["results"])
    assert sorted(fires) == [DUE + k * 1000 for k in range(10)], fires
    assert set(fires.values()) == {10}, fires
    one = answer["results"][0]["job"]
    assert one["window_ms"] == 9_999 and one["due_at"] == DUE
    assert one["next_attempt_at"] == one["fire_at"]
    lone = expect(await api.create(**body("lone", window_ms=9_999)), 201)
    assert DUE <= lone["fire_at"] <= DUE + 9_999


async def test_the_least_loaded_second_is_chosen(api: Api) -> None:
    for i in range(3):
        expect(await api.create(**body(f"fixed{i}")), 201)  # DUE is busy
        expect(await api.create(**body(f"later{i}", due_at=DUE + 1000)), 201)
    flexible = expect(await api.create(**body("flex", window_ms=2000)), 201)
    assert flexible["fire_at"] == DUE + 2000, flexible
    plain = expect(await api.create(**body("plain")), 201)
    assert plain["fire_at"] == DUE and plain["window_ms"] == 0


async def test_a_repeated_create_compares_the_window_not_the_moment(api: Api) -> None:
    first = expect(await api.create(**body(window_ms=60_000)), 201)
    for i in range(5):  # moves the least-loaded second
        expect(await api.create(**body(f"x{i}", due_at=first["fire_at"])), 201)
    again = expect(await api.create(**body(window_ms=60_000)), 200)
    assert again["fire_at"] == first["fire_at"]
    problem = expect(await api.create(**body(window_ms=30_000)), 409)
    assert problem["status"] == 409
    expect(await api.create(**body()), 409)


@pytest.mark.parametrize("window", [-1, 3_600_001, 1.5, "60s", None])
async def test_a_bad_window_is_refused_and_changes_nothing(api: Api, window: Any) -> None:
    problem = expect(await api.create(**body(window_ms=window)), 422)
    assert "window_ms" in str(problem), problem
    expect(await api.request("GET", "/v1/jobs/orders/j1"), 404)


async def test_a_reschedule_fires_at_the_new_due_time(api: Api) -> None:
    expect(await api.create(**body("busy")), 201)
    moved = expect(await api.create(**body(window_ms=5000)), 201)
    assert moved["fire_at"] != DUE
    patched = expect(
        await api.request("PATCH", "/v1/jobs/orders/j1", json={"due_at": DUE + 90_000}), 200
    )
    assert patched["fire_at"] == DUE + 90_000 == patched["next_attempt_at"], patched


async def test_a_token_of_some_biz_types_names_one(make_api: Callable[..., Any]) -> None:
    api = await seeded(make_api)
    viewer = bearer(secret_of(Role.VIEWER))  # covers team-a-* only
    query = {"from": NOW, "to": NOW + 120_000, "step_ms": 60_000}
    problem = expect(await api.request("GET", "/v1/calendar", params=query, headers=viewer), 403)
    assert "biz_type" in problem["detail"], problem
    own = {**query, "biz_type": IN}
    got = expect(await api.request("GET", "/v1/calendar", params=own, headers=viewer), 200)
    assert [b["due"] for b in got["buckets"]] == [0, 2], got  # its job and its schedule's
    other = {**query, "biz_type": OUT}
    expect(await api.request("GET", "/v1/calendar", params=other, headers=viewer), 403)
    everyone = expect(
        await api.request("GET", "/v1/calendar", params=query, headers=bearer(BOOT)), 200
    )
    assert [b["due"] for b in everyone["buckets"]] == [0, 4], everyone
