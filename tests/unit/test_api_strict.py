"""Strict input: unknown fields, due times in seconds, integral floats and the bounds of
docs/api.md, each a 422 naming the field, changing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api_harness import NOW, Api, expect, locs
from timer_service.constants import (
    MAX_BURST,
    MAX_CONCURRENCY,
    MAX_TIMEOUT_MS,
    MIN_CYCLE_INTERVAL_MS,
    MIN_DUE_AT_MS,
    MIN_RATE_LIMIT_PER_S,
)

CALLBACK = "http://127.0.0.1:9000/cb"


async def refused(api: Api, method: str, path: str, body: Any, loc: list[Any]) -> str:
    """Expect a 422 with an error at `loc` and an unchanged store; the error's message."""
    before = await api.snapshot()
    problem = expect(await api.request(method, path, json=body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a refused request changed the store"
    return next(e["msg"] for e in problem["errors"] if e["loc"] == loc)


# -- unknown fields ---------------------------------------------------------------------------

UNKNOWN_FIELDS = [
    ("PUT", "/v1/biz-types/orders", {"callback_url": CALLBACK, "rate_limt": 5}, ["rate_limt"]),
    (
        "PUT",
        "/v1/biz-types/orders",
        {"callback_url": CALLBACK, "retry": {"max_attempt": 3}},
        ["retry", "max_attempt"],
    ),
    ("POST", "/v1/biz-types/orders/secret:rotate", {"keep_previous": 5}, ["keep_previous"]),
    ("POST", "/v1/jobs", {"biz_type": "orders", "delay_ms": 1, "paylod": 1}, ["paylod"]),
    ("PATCH", "/v1/jobs/orders/j1", {"delay_ms": 5, "paylod": 1}, ["paylod"]),
    ("PUT", "/v1/schedules/orders/s1", {"cron": "@daily", "tz": "UTC"}, ["tz"]),
    ("POST", "/v1/jobs:batch", {"jobs": [{"biz_type": "orders", "delay_ms": 1}], "x": 1}, ["x"]),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), UNKNOWN_FIELDS)
async def test_an_unknown_field_is_422_naming_it(
    api: Api, method: str, path: str, body: dict[str, Any], field: list[str]
) -> None:
    expect(await api.create(biz_type="orders", job_id="j1", delay_ms=60_000), 201)
    msg = await refused(api, method, path, body, ["body", *field])
    assert "not a field" in msg, f"expected the message to say so, got {msg!r}"


async def test_an_unknown_field_in_a_batch_item_fails_that_item_only(api: Api) -> None:
    jobs = [
        {"biz_type": "orders", "job_id": "ok", "delay_ms": 1},
        {"biz_type": "orders", "job_id": "typo", "delay_ms": 1, "paylod": {"a": 1}},
    ]
    body = expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": jobs}), 200)
    statuses = [r["status"] for r in body["results"]]
    assert statuses == [201, 422], f"expected [201, 422], got {statuses}"
    error_locs = locs(body["results"][1]["error"])
    assert error_locs == [["body", "jobs", 1, "paylod"]], f"got {error_locs}"
    expect(await api.request("GET", "/v1/jobs/orders/typo"), 404)


async def test_the_schema_declares_no_additional_properties(api: Api) -> None:
    schemas = (await api.request("GET", "/openapi.json")).json()["components"]["schemas"]
    for name in ("BizTypeIn", "RetryPolicyIn", "JobCreateIn", "JobPatchIn", "ScheduleIn"):
        got = schemas[name].get("additionalProperties")
        assert got is False, f"{name}: expected additionalProperties false, got {got!r}"


# -- due times in seconds -----------------------------------------------------------------------


@pytest.mark.parametrize("due_at", [1_767_225_600, 0, MIN_DUE_AT_MS - 1])
async def test_a_due_at_that_can_only_be_seconds_is_422(api: Api, due_at: int) -> None:
    body = {"biz_type": "orders", "job_id": "s", "due_at": due_at}
    msg = await refused(api, "POST", "/v1/jobs", body, ["body", "due_at"])
    assert "looks like seconds" in msg, f"expected a hint about seconds, got {msg!r}"


async def test_due_at_from_2001_on_in_ms_is_accepted(api: Api) -> None:
    job = expect(await api.create(biz_type="orders", job_id="p", due_at=MIN_DUE_AT_MS), 201)
    assert job["due_at"] == MIN_DUE_AT_MS, job


async def test_a_reschedule_and_a_schedule_start_in_seconds_are_422(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="j", delay_ms=60_000), 201)
    body = {"due_at": 1_767_225_600}
    await refused(api, "PATCH", "/v1/jobs/orders/j", body, ["body", "due_at"])
    schedule = {"cron": "@daily", "start_at": 1_767_225_600}
    await refused(api, "PUT", "/v1/schedules/orders/s", schedule, ["body", "start_at"])


# -- integral floats ------------------------------------------------------------------------------


async def test_integral_floats_are_integers(api: Api) -> None:
    body = {
        "callback_url": CALLBACK,
        "burst": 5.0,
        "timeout_ms": 2000.0,
        "retry": {"max_attempts": 3.0},
    }
    biz = expect(await api.request("PUT", "/v1/biz-types/orders", json=body), 200)
    got = (biz["burst"], biz["timeout_ms"], biz["retry"]["max_attempts"])
    assert got == (5, 2000, 3), f"expected (5, 2000, 3), got {got}"
    assert all(type(v) is int for v in got), f"expected integers, got {got!r}"
    job = expect(await api.create(biz_type="orders", job_id="f", due_at=float(NOW + 1000)), 201)
    assert job["due_at"] == NOW + 1000 and type(job["due_at"]) is int, job
    job = expect(await api.create(biz_type="orders", job_id="d", delay_ms=1000.0), 201)
    assert job["due_at"] == NOW + 1000, job
    spec = {"intervals_ms": [60_000.0], "max_runs": 2.0}
    schedule = expect(await api.request("PUT", "/v1/schedules/orders/s", json=spec), 201)
    assert (schedule["intervals_ms"], schedule["max_runs"]) == ([60_000], 2), schedule


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("PUT", "/v1/biz-types/orders", {"callback_url": CALLBACK, "burst": 5.5}, ["burst"]),
        ("POST", "/v1/jobs", {"biz_type": "orders", "delay_ms": 0.5}, ["delay_ms"]),
        ("POST", "/v1/jobs", {"biz_type": "orders", "due_at": NOW + 0.5}, ["due_at"]),
        ("PUT", "/v1/schedules/orders/s", {"intervals_ms": [1000.25]}, ["intervals_ms", 0]),
    ],
)
async def test_a_number_with_a_fraction_is_not_an_integer(
    api: Api, method: str, path: str, body: dict[str, Any], loc: list[Any]
) -> None:
    msg = await refused(api, method, path, body, ["body", *loc])
    assert "must be an integer" in msg, f"expected 'must be an integer', got {msg!r}"


# -- bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_limit_per_s", 1e-300),
        ("rate_limit_per_s", MIN_RATE_LIMIT_PER_S / 2),
        ("timeout_ms", MAX_TIMEOUT_MS + 1),
        ("timeout_ms", 2**53),
        ("burst", MAX_BURST + 1),
        ("max_concurrency", MAX_CONCURRENCY + 1),
    ],
)
async def test_a_biz_type_setting_out_of_bounds_is_422(api: Api, field: str, value: Any) -> None:
    body = {"callback_url": CALLBACK, field: value}
    msg = await refused(api, "PUT", "/v1/biz-types/orders", body, ["body", field])
    assert "greater" in msg or "less" in msg, f"expected the bound in the message, got {msg!r}"


async def test_biz_type_settings_at_their_bounds_are_accepted(api: Api) -> None:
    body = {
        "callback_url": CALLBACK,
        "rate_limit_per_s": MIN_RATE_LIMIT_PER_S,
        "timeout_ms": MAX_TIMEOUT_MS,
        "burst": MAX_BURST,
        "max_concurrency": MAX_CONCURRENCY,
    }
    biz = expect(await api.request("PUT", "/v1/biz-types/orders", json=body), 200)
    got = {name: biz[name] for name in body}
    assert got == body, f"expected {body}, got {got}"


async def test_a_cycling_schedule_finer_than_a_second_is_422(api: Api) -> None:
    spec = {"intervals_ms": [MIN_CYCLE_INTERVAL_MS, 1], "cycle": True}
    msg = await refused(api, "PUT", "/v1/schedules/orders/s", spec, ["body", "intervals_ms", 1])
    assert str(MIN_CYCLE_INTERVAL_MS) in msg, f"expected the bound in the message, got {msg!r}"


async def test_a_finite_interval_list_may_be_finer(api: Api) -> None:
    spec = {"intervals_ms": [500, 500, 1000], "cycle": False}
    schedule = expect(await api.request("PUT", "/v1/schedules/orders/s", json=spec), 201)
    assert schedule["next_run_at"] == NOW + 500, schedule
    cycling = {"intervals_ms": [MIN_CYCLE_INTERVAL_MS], "cycle": True}
    expect(await api.request("PUT", "/v1/schedules/orders/c", json=cycling), 201)
