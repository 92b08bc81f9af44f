"""The canary at the API: its endpoint counts only callbacks signed with its secret, and
nothing of it shows in a business's listings, stats, audit or per-biz-type metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.callback import build_request
from tests.contract.stores import list_jobs
from tests.unit.api_harness import Api, expect
from timer_service.canary import Canary
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.metrics import Metrics
from timer_service.registration import Registrar

INTERVAL_MS = 10_000


def canary_of(api: Api) -> Canary:
    registrar = Registrar(api.store.jobs, api.metrics)
    return Canary(
        api.store.biz_types,
        registrar,
        api.clock,
        interval_ms=INTERVAL_MS,
        callback_url="http://api/canary",
    )


def canary_samples(metrics: Metrics) -> tuple[float | None, float | None]:
    registry = metrics.registry
    return (
        registry.get_sample_value("timer_canary_lateness_seconds_count"),
        registry.get_sample_value("timer_canary_last_success_timestamp_seconds"),
    )


async def signed_canary_callback(api: Api, late_ms: int) -> tuple[bytes, dict[str, str]]:
    """The callback a broker sends for the next slot's job, `late_ms` after it was due."""
    canary = canary_of(api)
    biz = await canary.ensure_biz_type()
    job = (await canary.create_next()).job
    api.clock.set(job.due_at + late_ms)
    request = build_request(biz, job, 1, api.clock.now_ms())
    return request.body, request.headers


async def test_a_signed_canary_sets_both_metrics(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    body, headers = await signed_canary_callback(api, late_ms=250)
    expect(await api.request("POST", "/canary", content=body, headers=headers), 204)
    count, last = canary_samples(api.metrics)
    assert count == 1, count
    assert last == api.clock.now_ms() / 1000, last
    lateness_sum = api.metrics.registry.get_sample_value("timer_canary_lateness_seconds_sum")
    assert lateness_sum == 0.25, lateness_sum


async def test_a_bad_signature_is_a_401_and_sets_nothing(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    body, headers = await signed_canary_callback(api, late_ms=100)
    forged = {**headers, "webhook-signature": "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}
    expect(await api.request("POST", "/canary", content=body, headers=forged), 401)
    tampered = body.replace(b'"attempt":1', b'"attempt":2')
    expect(await api.request("POST", "/canary", content=tampered, headers=headers), 401)
    unsigned = {k: v for k, v in headers.items() if k != "webhook-signature"}
    expect(await api.request("POST", "/canary", content=body, headers=unsigned), 401)
    assert canary_samples(api.metrics) == (0.0, 0.0)


async def test_no_canary_set_up_yet_is_a_401(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    json = {"Content-Type": "application/json"}
    expect(await api.request("POST", "/canary", content=b"{}", headers=json), 401)


async def test_the_endpoint_is_gone_when_the_canary_is_off(make_api: Callable[..., Any]) -> None:
    api = await make_api(canary_interval_ms=0)
    body, headers = await signed_canary_callback(api, late_ms=0)
    expect(await api.request("POST", "/canary", content=body, headers=headers), 404)
    assert canary_samples(api.metrics) == (0.0, 0.0)


async def test_no_listing_or_stats_shows_the_canary(api: Api) -> None:
    # "0first" sorts before the canary's keys ("_" after digits), "orders" after them.
    expect(await api.put_biz("0first"), 201)
    business = []
    for biz_type in ("0first", "orders"):
        for job_id in ("a", "b", "c"):
            body = {"biz_type": biz_type, "job_id": job_id, "delay_ms": 60_000}
            expect(await api.create(**body), 201)
            business.append(f"{biz_type}/{job_id}")
    canary = canary_of(api)
    await canary.ensure_biz_type()
    for _ in range(7):
        await canary.create_next()
        api.clock.advance(INTERVAL_MS)

    listed, cursor, pages = [], None, 0
    while True:
        query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = expect(await api.request("GET", "/v1/jobs", params=query), 200)
        pages += 1
        assert page["items"] or page["next_cursor"] is None, f"an empty page: {page}"
        listed += [f"{job['biz_type']}/{job['job_id']}" for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert not cursor.startswith("_"), cursor
    assert listed == business, listed
    assert pages == 3, pages

    bizes = expect(await api.request("GET", "/v1/biz-types"), 200)["items"]
    assert [biz["biz_type"] for biz in bizes] == ["0first", "orders"]
    stats = expect(await api.request("GET", "/v1/stats"), 200)["items"]
    assert sorted(item["biz_type"] for item in stats) == ["0first", "orders"]
    audited = expect(await api.request("GET", "/v1/audit"), 200)["items"]
    assert sorted(entry["biz_type"] for entry in audited) == ["0first", "orders"], audited
    for path in ("/v1/jobs?biz_type=_canary", "/v1/biz-types/_canary", "/v1/jobs/_canary/x"):
        expect(await api.request("GET", path), 422)


async def test_no_per_biz_type_metric_gets_a_canary_series(make_api: Callable[..., Any]) -> None:
    api = await make_api()
    canary = canary_of(api)
    await canary.ensure_biz_type()
    assert (await canary.create_next()).status.value == "created"
    metrics = api.metrics
    # Every facade method that takes a biz type, as the daemon and the broker call them.
    metrics.job_created(CANARY_BIZ_TYPE)
    metrics.registrations_over_quota(CANARY_BIZ_TYPE)
    metrics.job_dispatched(CANARY_BIZ_TYPE, 0.1)
    metrics.jobs_by_state({(CANARY_BIZ_TYPE, "pending"): 3, ("orders", "pending"): 1})
    metrics.job_reconciled(CANARY_BIZ_TYPE)
    metrics.callback_sent(CANARY_BIZ_TYPE, 1, 0.1)
    metrics.callback_early(CANARY_BIZ_TYPE, 0.1)
    metrics.callback_outcome(CANARY_BIZ_TYPE, "delivered", 0.1)
    metrics.rate_limited(CANARY_BIZ_TYPE)
    metrics.message_dropped(CANARY_BIZ_TYPE)
    metrics.message_handed_back(CANARY_BIZ_TYPE)
    metrics.schedule_run(CANARY_BIZ_TYPE)
    metrics.biz_types_consumed({CANARY_BIZ_TYPE: False, "orders": False})

    text = (await api.request("GET", "/metrics")).text
    canary_lines = [line for line in text.splitlines() if f'"{CANARY_BIZ_TYPE}"' in line]
    assert canary_lines == [], canary_lines
    assert 'timer_jobs_by_state{biz_type="orders",state="pending"} 1.0' in text
    assert 'timer_broker_consuming{biz_type="orders"} 1.0' in text


async def test_no_business_can_create_or_schedule_a_canary_job(api: Api) -> None:
    await canary_of(api).ensure_biz_type()  # it exists: only the pattern keeps them out
    job = {"biz_type": CANARY_BIZ_TYPE, "job_id": "x", "delay_ms": 1000}
    expect(await api.create(**job), 422)
    batch = expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": [job]}), 200)
    assert [item["status"] for item in batch["results"]] == [422], batch
    schedule = {"every_ms": 60_000}
    expect(await api.request("PUT", "/v1/schedules/_canary/s", json=schedule), 422)
    bulk = {"filter": {"biz_type": CANARY_BIZ_TYPE}, "dry_run": True}
    expect(await api.request("POST", "/v1/jobs:bulk-cancel", json=bulk), 422)
    jobs, _ = await list_jobs(api.store, CANARY_BIZ_TYPE, None, 10, None)
    assert jobs == [], jobs


async def test_the_canary_arrives_by_the_service_name_whatever_hosts_are_allowed(
    make_api: Callable[..., Any],
) -> None:
    api = await make_api(allowed_hosts="api.example.com")
    body, headers = await signed_canary_callback(api, late_ms=0)
    by_service = {**headers, "Host": "timer-api:8080"}
    expect(await api.request("POST", "/canary", content=body, headers=by_service), 204)
    assert canary_samples(api.metrics)[0] == 1
    expect(await api.request("GET", "/v1/biz-types", headers={"Host": "timer-api"}), 400)
