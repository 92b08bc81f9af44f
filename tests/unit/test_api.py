"""The REST API over the in-memory store: every endpoint and status of docs/api.md
(listing, health and the schema: test_api_list_health.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.api_harness import (
    CALLBACK,
    NOW,
    Api,
    dispatch,
    expect,
    finish,
    locs,
)
from timer_service.dispatch import OutcomeKind, SendRef

# -- biz types -----------------------------------------------------------------


async def test_put_biz_type_creates_with_defaults(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    body = expect(await api.put_biz("orders"), 201)
    assert body == {
        "biz_type": "orders",
        "callback_url": CALLBACK["callback_url"],
        "rate_limit_per_s": None,
        "burst": 1,
        "max_concurrency": 16,
        "timeout_ms": 10000,
        "retry": {
            "max_attempts": 10,
            "initial_backoff_ms": 1000,
            "max_backoff_ms": 600000,
            "multiplier": 2.0,
        },
        "has_signing_secret": False,
        "signing_secret_rotating_until": None,
        "paused": False,
        "registration_rate_per_s": None,
        "registration_burst": None,
        "created_at": NOW,
        "updated_at": NOW,
    }


async def test_put_biz_type_replaces_keeps_created_at_and_hides_secret(api: Api) -> None:
    api.clock.advance(5000)
    full = {
        "callback_url": "https://10.0.0.7/hook",
        "rate_limit_per_s": 100.0,
        "burst": 10,
        "max_concurrency": 32,
        "timeout_ms": 5000,
        "retry": {
            "max_attempts": 3,
            "initial_backoff_ms": 0,
            "max_backoff_ms": 10,
            "multiplier": 1,
        },
        "signing_secret": "s3cret",
        "paused": True,
    }
    response = await api.request("PUT", "/v1/biz-types/orders", json=full)
    body = expect(response, 200)
    assert "s3cret" not in response.text, f"secret leaked: {response.text}"
    assert body["has_signing_secret"] is True
    assert body["created_at"] == NOW and body["updated_at"] == NOW + 5000, body
    for key in (
        "callback_url",
        "rate_limit_per_s",
        "burst",
        "max_concurrency",
        "timeout_ms",
        "paused",
    ):
        assert body[key] == full[key], f"{key}: expected {full[key]!r}, got {body[key]!r}"
    assert body["retry"]["multiplier"] == 1.0
    stored = await api.store.biz_types.get_biz_type("orders")
    assert stored is not None and stored.signing_secret == "s3cret"
    got = expect(await api.request("GET", "/v1/biz-types/orders"), 200)
    assert got == body
    listed = expect(await api.request("GET", "/v1/biz-types"), 200)
    assert listed == {"items": [body]}, listed


async def test_get_unknown_biz_type_is_404(api: Api) -> None:
    expect(await api.request("GET", "/v1/biz-types/nope"), 404)


async def test_delete_biz_type(api: Api) -> None:
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)
    expect(await api.request("GET", "/v1/biz-types/orders"), 404)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 404)
    assert expect(await api.request("GET", "/v1/biz-types"), 200) == {"items": []}


async def test_delete_biz_type_with_active_jobs_is_409(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    before = await api.snapshot()
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 409)
    assert await api.snapshot() == before
    expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)


BAD_BIZ_BODIES = [
    ({}, ["body", "callback_url"]),
    ({"callback_url": "ftp://x/y"}, ["body", "callback_url"]),
    ({"callback_url": "not a url"}, ["body", "callback_url"]),
    ({"callback_url": 5}, ["body", "callback_url"]),
    # URLs the notifier could never send to (they once left jobs stuck dispatched):
    ({"callback_url": "http://orders..internal/cb"}, ["body", "callback_url"]),
    ({"callback_url": f"http://{'a' * 64}.internal/cb"}, ["body", "callback_url"]),
    ({"callback_url": "http://orders.internal:0/cb"}, ["body", "callback_url"]),
    ({"callback_url": "http://orders.internal/c\u0000b"}, ["body", "callback_url"]),
    ({**CALLBACK, "rate_limit_per_s": 0}, ["body", "rate_limit_per_s"]),
    ({**CALLBACK, "rate_limit_per_s": "10"}, ["body", "rate_limit_per_s"]),
    ({**CALLBACK, "burst": 0}, ["body", "burst"]),
    ({**CALLBACK, "burst": True}, ["body", "burst"]),
    ({**CALLBACK, "burst": 1.5}, ["body", "burst"]),
    ({**CALLBACK, "max_concurrency": 0}, ["body", "max_concurrency"]),
    ({**CALLBACK, "timeout_ms": 0}, ["body", "timeout_ms"]),
    ({**CALLBACK, "retry": {"max_attempts": 0}}, ["body", "retry", "max_attempts"]),
    ({**CALLBACK, "retry": {"initial_backoff_ms": -1}}, ["body", "retry", "initial_backoff_ms"]),
    ({**CALLBACK, "retry": {"max_backoff_ms": -1}}, ["body", "retry", "max_backoff_ms"]),
    ({**CALLBACK, "retry": {"multiplier": 0.5}}, ["body", "retry", "multiplier"]),
    ({**CALLBACK, "retry": 3}, ["body", "retry"]),
    ({**CALLBACK, "paused": "yes"}, ["body", "paused"]),
    ({**CALLBACK, "signing_secret": 42}, ["body", "signing_secret"]),
    ([CALLBACK], ["body"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD_BIZ_BODIES)
async def test_put_biz_type_rejects_bad_config(api: Api, body: Any, loc: list[Any]) -> None:
    before = await api.snapshot()
    problem = expect(await api.request("PUT", "/v1/biz-types/orders", json=body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a rejected request changed the store"


@pytest.mark.parametrize("name", ["Orders", "-x", "a" * 65, "a b", "a.b%0A"])
async def test_bad_biz_type_in_path_is_422(api: Api, name: str) -> None:
    before = await api.snapshot()
    problem = expect(await api.put_biz(name), 422)
    assert ["path", "biz_type"] in locs(problem), locs(problem)
    expect(await api.request("GET", f"/v1/biz-types/{name}"), 422)
    expect(await api.request("DELETE", f"/v1/biz-types/{name}"), 422)
    assert await api.snapshot() == before


async def test_loopback_and_private_callback_urls_are_allowed(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    for i, url in enumerate(["http://localhost:8000", "http://192.168.1.2/x", "https://[::1]/"]):
        expect(await api.request("PUT", f"/v1/biz-types/b{i}", json={"callback_url": url}), 201)


# -- create --------------------------------------------------------------------


async def test_create_with_due_at(api: Api) -> None:
    response = await api.create(
        biz_type="orders", job_id="order-42", due_at=NOW + 60_000, payload={"order": 42}
    )
    job = expect(response, 201)
    assert response.headers["location"] == "/v1/jobs/orders/order-42"
    assert job == {
        "biz_type": "orders",
        "job_id": "order-42",
        "due_at": NOW + 60_000,
        "payload": {"order": 42},
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": NOW + 60_000,
        "created_at": NOW,
        "updated_at": NOW,
        "delivered_at": None,
        "last_error": None,
        "history": [],
        "labels": {},
        "window_ms": 0,
        "fire_at": NOW + 60_000,
    }
    assert api.created_total("orders") == 1.0
    assert api.written == [[(NOW + 60_000) // 1000]]
    assert expect(await api.request("GET", "/v1/jobs/orders/order-42"), 200) == {
        **job,
        "lateness": None,
    }


async def test_create_with_delay_counts_from_server_clock(api: Api) -> None:
    api.clock.advance(123)
    job = expect(await api.create(biz_type="orders", job_id="d", delay_ms=5000), 201)
    assert job["due_at"] == NOW + 123 + 5000, job
    assert job["payload"] is None


async def test_create_without_job_id_generates_one(api: Api) -> None:
    first = expect(await api.create(biz_type="orders", delay_ms=0), 201)
    second = expect(await api.create(biz_type="orders", delay_ms=0), 201)
    assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,128}", first["job_id"]), first["job_id"]
    assert first["job_id"] != second["job_id"]


async def test_create_is_idempotent(api: Api) -> None:
    body = {"biz_type": "orders", "job_id": "a", "due_at": NOW + 1000, "payload": {"x": [1, 2]}}
    first = expect(await api.create(**body), 201)
    api.clock.advance(10)
    again = await api.create(**body)
    assert expect(again, 200) == first
    assert "location" not in again.headers or again.headers["location"]
    expect(await api.create(**{**body, "payload": {"x": [1, 3]}}), 409)
    expect(await api.create(**{**body, "due_at": NOW + 1001}), 409)
    expect(await api.create(**{k: v for k, v in body.items() if k != "payload"}), 409)
    assert api.created_total("orders") == 1.0
    assert len(api.written) == 1, f"only the 201 nudges the daemon: {api.written}"


async def test_rfc3339_and_epoch_ms_of_one_instant_are_equal(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="t", due_at=NOW + 1500), 201)
    for same in (
        "2026-01-01T00:00:01.500Z",
        "2026-01-01T01:00:01.5+01:00",
        "2025-12-31T19:00:01.500-05:00",
    ):
        expect(await api.create(biz_type="orders", job_id="t", due_at=same), 200)
    expect(await api.create(biz_type="orders", job_id="t", due_at="2026-01-01T00:00:01Z"), 409)


async def test_absent_payload_equals_null(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="n", due_at=NOW), 201)
    expect(await api.create(biz_type="orders", job_id="n", due_at=NOW, payload=None), 200)


async def test_delay_ms_retry_compares_payload_only(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="d", delay_ms=1000, payload=[1]), 201)
    api.clock.advance(700)
    job = expect(await api.create(biz_type="orders", job_id="d", delay_ms=9000, payload=[1]), 200)
    assert job["due_at"] == NOW + 1000, "the existing job is returned unchanged"
    expect(await api.create(biz_type="orders", job_id="d", delay_ms=1000, payload=[2]), 409)


async def test_same_create_returns_existing_job_whatever_its_state(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="c", due_at=NOW), 201)
    expect(await api.request("DELETE", "/v1/jobs/orders/c"), 200)
    job = expect(await api.create(biz_type="orders", job_id="c", due_at=NOW), 200)
    assert job["state"] == "cancelled"


async def test_past_due_is_accepted(api: Api) -> None:
    job = expect(await api.create(biz_type="orders", job_id="p", due_at=NOW - 86_400_000), 201)
    assert job["next_attempt_at"] == NOW - 86_400_000


async def test_horizon(make_api: Callable[..., Any]) -> None:
    api = await make_api(horizon_days=1)
    expect(await api.put_biz(), 201)
    day = 86_400_000
    expect(await api.create(biz_type="orders", job_id="edge", due_at=NOW + day), 201)
    before = await api.snapshot()
    problem = expect(await api.create(biz_type="orders", job_id="far", due_at=NOW + day + 1), 422)
    assert ["body", "due_at"] in locs(problem)
    problem = expect(await api.create(biz_type="orders", job_id="far", delay_ms=day + 1), 422)
    assert ["body", "delay_ms"] in locs(problem)
    assert await api.snapshot() == before


async def test_default_horizon_is_3650_days(api: Api) -> None:
    horizon = 3650 * 86_400_000
    expect(await api.create(biz_type="orders", job_id="ok", delay_ms=horizon), 201)
    expect(await api.create(biz_type="orders", job_id="no", delay_ms=horizon + 1), 422)


async def test_unknown_biz_type_is_422(api: Api) -> None:
    before = await api.snapshot()
    problem = expect(await api.create(biz_type="nope", job_id="a", delay_ms=1), 422)
    assert ["body", "biz_type"] in locs(problem)
    assert await api.snapshot() == before


async def test_payload_size_limit(api: Api) -> None:
    limit = 65536
    at_limit = "x" * (limit - 2)  # the quotes make it exactly the limit
    expect(await api.create(biz_type="orders", job_id="fits", delay_ms=1, payload=at_limit), 201)
    before = await api.snapshot()
    expect(
        await api.create(biz_type="orders", job_id="big", delay_ms=1, payload=at_limit + "x"), 413
    )
    # The limit is on the UTF-8 bytes, not characters.
    expect(
        await api.create(biz_type="orders", job_id="big", delay_ms=1, payload="é" * (limit // 2)),
        413,
    )
    assert await api.snapshot() == before


BAD_JOB_BODIES = [
    ({"biz_type": "orders", "job_id": "a"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": NOW, "delay_ms": 5}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": True}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": 1.5}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": -1}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-01-01T00:00:00"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-01-01"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "tomorrow"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": "2026-13-01T00:00:00Z"}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "due_at": [NOW]}, ["body", "due_at"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": -1}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": "5"}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a", "delay_ms": False}, ["body", "delay_ms"]),
    ({"biz_type": "orders", "job_id": "a b", "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": "x" * 129, "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": "", "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "orders", "job_id": 7, "delay_ms": 1}, ["body", "job_id"]),
    ({"biz_type": "Orders", "job_id": "a", "delay_ms": 1}, ["body", "biz_type"]),
    ({"job_id": "a", "delay_ms": 1}, ["body", "biz_type"]),
    ([{"biz_type": "orders", "delay_ms": 1}], ["body"]),
    ("orders", ["body"]),
]


@pytest.mark.parametrize(("body", "loc"), BAD_JOB_BODIES)
async def test_create_rejects_bad_input(api: Api, body: Any, loc: list[Any]) -> None:
    before = await api.snapshot()
    problem = expect(await api.request("POST", "/v1/jobs", json=body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {locs(problem)}"
    assert await api.snapshot() == before, "a rejected request changed the store"
    assert api.created_total("orders") == 0.0


# -- read, cancel, reschedule, replay ----------------------------------------------


async def test_get_unknown_job_is_404(api: Api) -> None:
    expect(await api.request("GET", "/v1/jobs/orders/none"), 404)


@pytest.mark.parametrize(
    "path", ["/v1/jobs/Orders/a", "/v1/jobs/orders/a%20b", f"/v1/jobs/orders/{'x' * 129}"]
)
async def test_bad_identity_in_path_is_422(api: Api, path: str) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    before = await api.snapshot()
    for method in ("GET", "DELETE"):
        expect(await api.request(method, path), 422)
    expect(await api.request("PATCH", path, json={"delay_ms": 5}), 422)
    expect(await api.request("POST", f"{path}/replay"), 422)
    assert await api.snapshot() == before


async def test_cancel(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)
    api.clock.advance(10)
    job = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    assert job["state"] == "cancelled" and job["next_attempt_at"] is None, job
    assert job["updated_at"] == NOW + 10
    again = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    assert again["state"] == "cancelled"
    expect(await api.request("DELETE", "/v1/jobs/orders/none"), 404)


async def test_cancel_dispatched_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    assert expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)["state"] == "cancelled"


async def test_cancel_once_the_callback_started_is_409_in_flight(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    ref = SendRef("orders", "a", NOW // 1000, "c1")
    assert await api.store.outcomes.start_sending([ref], "send-1", NOW)
    before = await api.snapshot()
    problem = expect(await api.request("DELETE", "/v1/jobs/orders/a"), 409)
    assert problem["type"].endswith("/callback-in-flight"), problem
    assert await api.snapshot() == before


@pytest.mark.parametrize("kind", [OutcomeKind.DELIVERED, OutcomeKind.DEAD])
async def test_cancel_final_job_is_409(api: Api, kind: OutcomeKind) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", kind)
    before = await api.snapshot()
    expect(await api.request("DELETE", "/v1/jobs/orders/a"), 409)
    assert await api.snapshot() == before


async def test_reschedule_pending_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW + 5000, payload=1), 201)
    api.written.clear()
    job = expect(await api.request("PATCH", "/v1/jobs/orders/a", json={"due_at": NOW + 9000}), 200)
    assert (job["due_at"], job["next_attempt_at"], job["payload"]) == (NOW + 9000, NOW + 9000, 1)
    job = expect(
        await api.request(
            "PATCH", "/v1/jobs/orders/a", json={"delay_ms": 100, "payload": {"new": True}}
        ),
        200,
    )
    assert (job["due_at"], job["payload"]) == (NOW + 100, {"new": True}), job
    job = expect(
        await api.request(
            "PATCH", "/v1/jobs/orders/a", json={"due_at": "2026-01-01T00:00:02Z", "payload": None}
        ),
        200,
    )
    assert (job["due_at"], job["payload"]) == (NOW + 2000, None), job
    assert api.written == [[NOW // 1000 + 9], [NOW // 1000], [NOW // 1000 + 2]], api.written


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 422),
        ({"due_at": NOW, "delay_ms": 1}, 422),
        ({"delay_ms": -5}, 422),
        ({"due_at": "2026-01-01T00:00:00"}, 422),
        ({"delay_ms": 3650 * 86_400_000 + 1}, 422),
        ({"delay_ms": 1, "payload": "x" * 70_000}, 413),
        ([1], 422),
    ],
)
async def test_reschedule_rejects_bad_input(api: Api, body: Any, status: int) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW + 5000), 201)
    before = await api.snapshot()
    expect(await api.request("PATCH", "/v1/jobs/orders/a", json=body), status)
    assert await api.snapshot() == before


async def test_reschedule_unknown_is_404_and_not_pending_is_409(api: Api) -> None:
    expect(await api.request("PATCH", "/v1/jobs/orders/none", json={"delay_ms": 1}), 404)
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await dispatch(api.store, "orders", "a")
    before = await api.snapshot()
    expect(await api.request("PATCH", "/v1/jobs/orders/a", json={"delay_ms": 1}), 409)
    assert await api.snapshot() == before


async def test_replay_dead_job(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", OutcomeKind.DEAD)
    api.clock.advance(60_000)
    api.written.clear()
    job = expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 200)
    assert job["state"] == "pending" and job["next_attempt_at"] == NOW + 60_000, job
    assert job["attempts"] == 1 and len(job["history"]) == 1, job
    assert api.written == [[(NOW + 60_000) // 1000]]
    api.clock.advance(500)  # a retry of a replay whose answer was lost: the same job
    again = expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 200)
    assert again == job, f"a retried replay changed the job:\n{again}\n!=\n{job}"
    expect(await api.request("POST", "/v1/jobs/orders/none/replay"), 404)


async def test_replay_of_a_deleted_biz_type_s_dead_job_is_404_and_changes_nothing(
    api: Api,
) -> None:
    """Dead jobs do not block a delete; replayed, one would be pending for ever, with
    no broker consuming its biz type (issue 30, break 7's sibling)."""
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", OutcomeKind.DEAD)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)
    before = await api.snapshot()
    problem = expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 404)
    assert "biz type" in problem["detail"], problem
    assert await api.snapshot() == before


async def test_replay_delivered_job_is_409(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    await finish(api.store, "orders", "a", OutcomeKind.DELIVERED)
    job = expect(await api.request("GET", "/v1/jobs/orders/a"), 200)
    assert job["state"] == "delivered" and job["history"][0]["status_code"] == 200, job
    expect(await api.request("POST", "/v1/jobs/orders/a/replay"), 409)
