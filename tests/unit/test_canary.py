"""The canary's task on a FakeClock: one job per slot however many replicas run it,
its biz type put once with one secret, and nothing at all when it is off."""

from __future__ import annotations

import asyncio

from tests.contract.stores import list_jobs
from tests.unit.api_harness import NOW
from timer_service.canary import Canary, next_slot_ms, slot_job_id
from timer_service.clock import FakeClock
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.dev import banner
from timer_service.metrics import Metrics
from timer_service.processes.build import build_canary
from timer_service.processes.dependencies import Dependencies
from timer_service.registration import Registrar
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore

INTERVAL_MS = 10_000
URL = "http://127.0.0.1:8080/canary"


def replica(store: MemoryStore, clock: FakeClock, metrics: Metrics) -> Canary:
    registrar = Registrar(store.jobs, metrics)
    return Canary(store.biz_types, registrar, clock, interval_ms=INTERVAL_MS, callback_url=URL)


async def canary_job_ids(store: MemoryStore) -> list[str]:
    jobs, _ = await list_jobs(store, CANARY_BIZ_TYPE, None, 100, None)
    return sorted(job.job_id for job in jobs)


def test_the_next_slot_is_the_next_multiple_of_the_interval() -> None:
    assert next_slot_ms(NOW, INTERVAL_MS) == NOW + INTERVAL_MS
    assert next_slot_ms(NOW + 1, INTERVAL_MS) == NOW + INTERVAL_MS
    assert next_slot_ms(NOW + INTERVAL_MS - 1, INTERVAL_MS) == NOW + INTERVAL_MS


async def test_two_replicas_create_one_job_per_slot_with_one_secret() -> None:
    store = MemoryStore(buckets=60)
    await store.setup()
    clock = FakeClock(NOW)
    metrics = Metrics()
    replicas = [replica(store, clock, metrics) for _ in range(2)]
    for canary in replicas:
        await canary.start()
    await clock.run_for(35_000)
    for canary in replicas:
        await canary.stop()

    slots = [NOW + k * INTERVAL_MS for k in (1, 2, 3, 4)]
    assert await canary_job_ids(store) == sorted(slot_job_id(due) for due in slots)
    for due in slots:
        job = await store.jobs.get_job(CANARY_BIZ_TYPE, slot_job_id(due))
        assert job is not None and job.due_at == due, job
    biz = await store.biz_types.get_biz_type(CANARY_BIZ_TYPE)
    assert biz is not None and biz.signing_secret is not None
    assert biz.callback_url == URL and biz.timeout_ms <= 2000 and biz.retry.max_attempts == 3
    # Each replica ensures the biz type again: the secret the first one made stands.
    again = await replicas[1].ensure_biz_type()
    assert again.signing_secret == biz.signing_secret


async def test_racing_replicas_agree_on_one_secret() -> None:
    store = MemoryStore(buckets=60)
    await store.setup()
    clock, metrics = FakeClock(NOW), Metrics()
    replicas = [replica(store, clock, metrics) for _ in range(3)]
    put = await asyncio.gather(*(canary.ensure_biz_type() for canary in replicas))
    stored = await store.biz_types.get_biz_type(CANARY_BIZ_TYPE)
    assert stored is not None
    assert {biz.signing_secret for biz in put} == {stored.signing_secret}


async def test_a_new_url_replaces_the_stored_one_and_keeps_the_secret() -> None:
    store = MemoryStore(buckets=60)
    await store.setup()
    clock, metrics = FakeClock(NOW), Metrics()
    first = await replica(store, clock, metrics).ensure_biz_type()
    clock.advance(1000)
    moved = Canary(
        store.biz_types,
        Registrar(store.jobs, metrics),
        clock,
        interval_ms=INTERVAL_MS,
        callback_url="http://timer-api:8080/canary",
    )
    second = await moved.ensure_biz_type()
    stored = await store.biz_types.get_biz_type(CANARY_BIZ_TYPE)
    assert stored == second and stored.callback_url == "http://timer-api:8080/canary"
    assert stored.signing_secret == first.signing_secret
    assert stored.created_at == first.created_at and stored.updated_at == NOW + 1000


async def test_a_failing_store_costs_a_slot_not_the_task() -> None:
    store = MemoryStore(buckets=60)
    await store.setup()
    clock, metrics = FakeClock(NOW), Metrics()
    canary = replica(store, clock, metrics)
    real_create = store.jobs.create_jobs
    failures = iter([True])

    async def create_once_failing(*args: object, **kw: object) -> object:
        if next(failures, False):
            raise ConnectionError("store down")
        return await real_create(*args, **kw)  # type: ignore[arg-type]

    store.jobs.create_jobs = create_once_failing  # type: ignore[method-assign]
    await canary.start()
    await clock.run_for(25_000)
    await canary.stop()
    # Slot 1 was lost with the failed create; slots 2 and 3 came on time.
    expected = [slot_job_id(NOW + k * INTERVAL_MS) for k in (2, 3)]
    assert await canary_job_ids(store) == sorted(expected)


async def test_no_canary_when_the_interval_is_0() -> None:
    store = MemoryStore(buckets=60)
    deps = Dependencies(FakeClock(NOW), store, Metrics(), instance_id="api-1")
    off = Settings(_env_file=None, canary_interval_ms=0)  # type: ignore[call-arg]
    assert build_canary(off, deps) is None
    on = Settings(_env_file=None)  # type: ignore[call-arg]
    assert on.canary_interval_ms == 10_000
    canary = build_canary(on, deps)
    assert canary is not None and canary.callback_url == "http://127.0.0.1:8080/canary"


def test_the_default_url_is_this_apis_own_canary() -> None:
    def url(**settings: object) -> str:
        return Settings(_env_file=None, **settings).canary_url_or_default()  # type: ignore[call-arg]

    assert url() == "http://127.0.0.1:8080/canary"
    assert url(http_host="0.0.0.0", http_port=9000) == "http://127.0.0.1:9000/canary"
    assert url(http_host="::") == "http://[::1]:8080/canary"
    assert url(canary_url="http://timer-api:8080/canary") == "http://timer-api:8080/canary"


def test_the_dev_banner_says_where_the_canary_goes() -> None:
    on = Settings(_env_file=None, http_port=9000)  # type: ignore[call-arg]
    assert "canary: every 10 s to http://127.0.0.1:9000/canary" in banner(on, "s", "q")
    off = Settings(_env_file=None, canary_interval_ms=0)  # type: ignore[call-arg]
    assert "canary: off (TIMER_CANARY_INTERVAL_MS=0)" in banner(off, "s", "q")
