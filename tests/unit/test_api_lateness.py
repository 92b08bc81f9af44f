"""`lateness` on GET of a job (docs/api.md, "Why late"), over the in-memory store: what a
late job waits for, a final job's breakdown, and no extra read for a job on time."""

from __future__ import annotations

from typing import Any

from tests.unit.api_harness import NOW, Api, dispatch, expect
from timer_service.dispatch import HeldBiz, Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt
from timer_service.partitions import lease_name, partition_of, pointer_name

JOB = "/v1/jobs/orders/o-1"
EXTRA_READS = ("get_biz_type", "broker_beats", "list_leases", "load_pointers")


async def late_job(api: Api, late_ms: int = 5_000) -> None:
    expect(await api.create(biz_type="orders", job_id="o-1", due_at=NOW), 201)
    api.clock.advance(late_ms)


async def own_partition(api: Api, pointer_s: int = NOW // 1000) -> None:
    """A live daemon holds partition 0 (the only one by default) and scanned to `pointer_s`."""
    now = api.clock.now_ms()
    await api.store.leases.acquire_leases([lease_name(0)], "daemon-a", 1, 5_000, now)
    await api.store.pointers.save_pointers([pointer_name(0)], pointer_s, 1)


async def lateness(api: Api) -> dict[str, Any]:
    body = expect(await api.request("GET", JOB), 200)
    assert body["lateness"] is not None, f"expected a lateness, got {body}"
    return body["lateness"]  # type: ignore[no-any-return]


async def test_a_job_on_time_shows_null_and_costs_no_extra_read(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="o-1", delay_ms=60_000), 201)
    api.store.ops.clear()
    body = expect(await api.request("GET", JOB), 200)
    assert body["lateness"] is None
    assert not [op for op in EXTRA_READS if api.store.ops[op]], api.store.ops


async def test_a_listing_does_not_judge_lateness(api: Api) -> None:
    await late_job(api)
    api.store.ops.clear()
    [item] = expect(await api.request("GET", "/v1/jobs?biz_type=orders"), 200)["items"]
    assert "lateness" not in item
    assert not [op for op in EXTRA_READS if api.store.ops[op]], api.store.ops


async def test_a_paused_biz_type(api: Api) -> None:
    expect(await api.request("PATCH", "/v1/biz-types/orders", json={"paused": True}), 200)
    await late_job(api)
    got = await lateness(api)
    assert (got["kind"], got["waiting_for"], got["late_ms"]) == ("waiting", "paused", 5_000)
    assert "orders is paused" in got["detail"]


async def test_no_daemon_owns_the_partition(api: Api) -> None:
    await late_job(api)
    got = await lateness(api)
    assert got["waiting_for"] == "no_daemon", got
    assert "partition 0" in got["detail"] and "never taken" in got["detail"]


async def test_the_daemon_is_behind(api: Api) -> None:
    await late_job(api)
    await own_partition(api, pointer_s=NOW // 1000 - 40)
    got = await lateness(api)
    assert got["waiting_for"] == "daemon_behind", got
    assert "40 s before the job's" in got["detail"]


async def test_no_broker_consumes_the_biz_type(api: Api) -> None:
    await late_job(api)
    await own_partition(api)
    await dispatch(api.store, "orders", "o-1")
    other = await api.store.brokers.broker_heartbeat("broker-x", [], NOW, 10_000, ["refunds"])
    assert other
    got = await lateness(api)
    assert got["waiting_for"] == "no_broker", got
    assert "no live broker consumes biz type orders" in got["detail"]


async def test_behind_the_rate_limit(api: Api) -> None:
    patch = {"rate_limit_per_s": 20.0, "burst": 2}
    expect(await api.request("PATCH", "/v1/biz-types/orders", json=patch), 200)
    await late_job(api)
    await dispatch(api.store, "orders", "o-1")
    held = [HeldBiz("orders", 100, NOW - 10_000)]
    now = api.clock.now_ms()
    await api.store.brokers.broker_heartbeat("broker-a", held, now, 10_000, ["orders"])
    got = await lateness(api)
    assert (got["waiting_for"], got["until"]) == ("rate_limit", now + 5_000), got
    assert "100 messages of orders held" in got["detail"]


async def test_a_retry_in_its_backoff(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="o-1", due_at=NOW), 201)
    await dispatch(api.store, "orders", "o-1")
    attempt = Attempt(1, NOW + 5, 503, "HTTP 503", 10)
    ref = SendRef("orders", "o-1", NOW // 1000, "c1")
    retry = Outcome(ref, OutcomeKind.RETRY, attempt, next_attempt_at=NOW + 30_000)
    await api.store.outcomes.record_outcomes([retry], NOW + 20)
    api.clock.advance(2_000)
    api.store.ops.clear()
    got = await lateness(api)
    assert (got["waiting_for"], got["until"], got["late_ms"]) == ("retry", NOW + 30_000, 2_000)
    assert f"waiting for retry at {NOW + 30_000}" in got["detail"]
    assert not [op for op in EXTRA_READS if api.store.ops[op]], api.store.ops


async def test_a_delivered_job_breaks_down_its_lateness(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="o-1", due_at=NOW), 201)
    job = await api.store.jobs.get_job("orders", "o-1")
    assert job is not None
    claimed = await api.store.scan.claim_due(NOW // 1000, NOW, "c1", 1, NOW + 1_200)
    assert claimed, "claim failed"
    attempt = Attempt(1, NOW + 1_500, 200, None, 700)
    ref = SendRef("orders", "o-1", NOW // 1000, "c1")
    await api.store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.DELIVERED, attempt)], NOW + 2_210
    )
    api.clock.advance(60_000)
    got = await lateness(api)
    assert got == {
        "kind": "final",
        "late_ms": 2_210,
        "waiting_for": None,
        "detail": "delivered 2210 ms after its moment, mostly in publish",
        "until": None,
        "send_ms": 1_500,
        "publish_ms": 1_200,
        "hold_ms": 300,
        "retries_ms": 0,
        "endpoint_ms": 700,
    }


async def test_the_openapi_documents_lateness(api: Api) -> None:
    spec = expect(await api.request("GET", "/openapi.json"), 200)
    get = spec["paths"]["/v1/jobs/{biz_type}/{job_id}"]["get"]
    ref = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    detail = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert "lateness" in detail["properties"]
    reasons = spec["components"]["schemas"]["WaitingFor"]["enum"]
    assert {"paused", "no_broker", "no_daemon", "retry", "rate_limit"} <= set(reasons)
    assert "lateness" not in spec["components"]["schemas"]["JobOut"]["properties"]


async def test_the_partition_judged_is_the_jobs_own(make_api: Any) -> None:
    api = await make_api(partitions=4)
    expect(await api.put_biz(), 201)
    await late_job(api)
    mine = partition_of("orders/o-1", 4)
    other = (mine + 1) % 4
    now = api.clock.now_ms()
    await api.store.leases.acquire_leases([lease_name(other)], "daemon-b", 1, 5_000, now)
    got = await lateness(api)
    assert got["waiting_for"] == "no_daemon", got
    assert f"partition {mine}:" in got["detail"], got
    await api.store.leases.acquire_leases([lease_name(mine)], "daemon-a", 1, 5_000, now)
    await api.store.pointers.save_pointers([pointer_name(mine)], NOW // 1000, 1)
    got = await lateness(api)
    assert got["waiting_for"] == "claim" and "daemon daemon-a owns" in got["detail"], got
