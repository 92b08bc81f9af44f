"""The fault-injecting store wrapper (timer_service/store/faulty.py)."""

from __future__ import annotations

import asyncio
import inspect
import random

import pytest

from timer_service.errors import NotFound, StoreUnavailable
from timer_service.jobs import CreateStatus, NewJob
from timer_service.store.faulty import FAULTABLE, FaultyStore, Injected
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

T0 = 1_767_225_600_000
BIZ = "orders"


def new(job_id: str = "j1", due_at: int = T0 + 5000) -> NewJob:
    return NewJob(BIZ, job_id, due_at, '{"a":1}')


@pytest.fixture
def inner() -> MemoryStore:
    return MemoryStore(buckets=60)


@pytest.fixture
def store(inner: MemoryStore) -> FaultyStore:
    return FaultyStore(inner)


async def test_without_faults_every_call_passes_through(
    inner: MemoryStore, store: FaultyStore
) -> None:
    [created] = await store.jobs.create_jobs([new()], T0)
    assert created.status is CreateStatus.CREATED
    assert await inner.jobs.get_job(BIZ, "j1") == created.job
    assert await store.jobs.get_job(BIZ, "j1") == created.job
    assert store.injected == []
    assert not store.armed


async def test_a_fault_before_applying_changes_nothing(
    inner: MemoryStore, store: FaultyStore
) -> None:
    store.fail("create_jobs", when="before")
    with pytest.raises(StoreUnavailable, match="before"):
        await store.jobs.create_jobs([new()], T0)
    assert await inner.jobs.get_job(BIZ, "j1") is None, "a call failed before must not apply"
    assert inner.state.versions == {}, "nor bump the seconds index"

    [retried] = await store.jobs.create_jobs([new()], T0)
    assert retried.status is CreateStatus.CREATED
    assert store.injected == [Injected("create_jobs", "before")]


async def test_a_fault_after_applying_loses_only_the_reply(
    inner: MemoryStore, store: FaultyStore
) -> None:
    store.fail("create_jobs", when="after")
    with pytest.raises(StoreUnavailable, match="reply was lost"):
        await store.jobs.create_jobs([new()], T0)
    job = await inner.jobs.get_job(BIZ, "j1")
    assert job is not None, "a call failed after must have applied"

    [retried] = await store.jobs.create_jobs([new()], T0)
    assert retried.status is CreateStatus.EXISTS, "the client's retry finds its job"
    assert store.injected == [Injected("create_jobs", "after")]


async def test_a_fault_after_hides_the_calls_own_error_too(store: FaultyStore) -> None:
    with pytest.raises(NotFound):
        await store.jobs.cancel_job(BIZ, "nobody", T0)
    store.fail("cancel_job", when="after")
    with pytest.raises(StoreUnavailable):
        await store.jobs.cancel_job(BIZ, "nobody", T0)


async def test_times_counts_calls_and_none_fails_until_healed(store: FaultyStore) -> None:
    store.fail("get_job", times=2)
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            await store.jobs.get_job(BIZ, "j1")
    assert await store.jobs.get_job(BIZ, "j1") is None
    assert not store.armed

    store.fail("get_job", times=None)
    for _ in range(5):
        with pytest.raises(StoreUnavailable):
            await store.jobs.get_job(BIZ, "j1")
    assert store.armed
    store.heal()
    assert await store.jobs.get_job(BIZ, "j1") is None
    assert store.injected_count("get_job") == 7, "heal keeps the log"


async def test_plans_of_one_method_apply_in_order_and_leave_others_alone(
    inner: MemoryStore, store: FaultyStore
) -> None:
    store.fail("create_jobs", when="before")
    store.fail("create_jobs", when="after")
    await store.leases.acquire_leases(["l"], "me", 1, 1000, T0)  # another method: untouched
    with pytest.raises(StoreUnavailable):
        await store.jobs.create_jobs([new("a")], T0)
    with pytest.raises(StoreUnavailable):
        await store.jobs.create_jobs([new("b")], T0)
    assert await inner.jobs.get_job(BIZ, "a") is None
    assert await inner.jobs.get_job(BIZ, "b") is not None
    assert [f.when for f in store.injected] == ["before", "after"]
    assert store.injected_count(when="after") == 1


def test_unknown_methods_and_bad_arguments_are_refused(store: FaultyStore) -> None:
    with pytest.raises(ValueError, match="create_job"):
        store.fail("create_job")  # a typo must not plan a fault that never fires
    with pytest.raises(ValueError, match="when"):
        store.fail("create_jobs", when="during")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="times"):
        store.fail("create_jobs", times=0)
    with pytest.raises(ValueError, match="rate"):
        store.fail_randomly(1.5, random.Random(1))
    with pytest.raises(ValueError, match="watch_seconds"):
        store.fail_randomly(0.5, random.Random(1), methods=["watch_seconds"])


def test_every_async_method_of_every_port_can_fail() -> None:
    assert {"create_jobs", "claim_due", "reclaim", "acquire_leases", "save_pointers"} <= set(
        FAULTABLE
    )
    assert {"start_sending", "record_outcomes", "put_biz_type"} <= set(FAULTABLE)
    assert "watch_seconds" not in FAULTABLE, "a change stream is not one call"
    assert FAULTABLE["claim_due"] == "scan" and FAULTABLE["record_outcomes"] == "outcomes"


async def test_random_faults_follow_the_rate_the_methods_and_the_seed(
    inner: MemoryStore,
) -> None:
    async def run(seed: int) -> list[Injected]:
        store = FaultyStore(MemoryStore())
        store.fail_randomly(0.3, random.Random(seed), methods=["get_job"])
        for _ in range(200):
            try:
                await store.jobs.get_job(BIZ, "x")
            except StoreUnavailable:
                pass
            (await store.pointers.load_pointers(["p0"])).get("p0")  # not listed: never fails
        return store.injected

    first = await run(7)
    assert 30 <= len(first) <= 90, f"expected about 60 faults of 200 calls, got {len(first)}"
    assert {f.method for f in first} == {"get_job"}
    assert {f.when for f in first} == {"before", "after"}
    assert await run(7) == first, "the same seed injects the same faults"

    store = FaultyStore(inner)
    store.fail_randomly(1.0, random.Random(1), when="after")
    with pytest.raises(StoreUnavailable):
        await store.jobs.create_jobs([new()], T0)
    assert await inner.jobs.get_job(BIZ, "j1") is not None
    store.fail_randomly(0.0, random.Random(1))
    await store.jobs.get_job(BIZ, "j1")
    assert store.injected == [Injected("create_jobs", "after")]


async def test_a_later_random_plan_replaces_the_earlier_one_only_for_its_methods(
    store: FaultyStore,
) -> None:
    store.fail_randomly(1.0, random.Random(1), when="before")
    store.fail_randomly(0.0, random.Random(2), methods=["get_job"])
    assert await store.jobs.get_job(BIZ, "j1") is None
    with pytest.raises(StoreUnavailable):
        (await store.pointers.load_pointers(["p0"])).get("p0")
    assert store.injected == [Injected("load_pointers", "before")]


async def test_planned_faults_come_before_random_ones(store: FaultyStore) -> None:
    store.fail_randomly(1.0, random.Random(1), when="before")
    store.fail("get_job", when="after")
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            await store.jobs.get_job(BIZ, "j1")
    assert [f.when for f in store.injected] == ["after", "before"]


async def test_a_stalled_call_applies_only_once_resumed(
    inner: MemoryStore, store: FaultyStore
) -> None:
    store.stall("create_jobs")
    call = asyncio.ensure_future(store.jobs.create_jobs([new()], T0))
    await asyncio.sleep(0)
    assert store.stalled == 1 and not call.done()
    assert await inner.jobs.get_job(BIZ, "j1") is None, "a stalled call has not applied"
    [other] = await store.jobs.create_jobs([new("j2")], T0)  # the stall was the next call's
    assert other.status is CreateStatus.CREATED

    store.resume()
    [created] = await call
    assert created.status is CreateStatus.CREATED and store.stalled == 0
    assert store.injected == [Injected("create_jobs", "stall")]


async def test_heal_resumes_stalled_calls_and_drops_unreached_stalls(store: FaultyStore) -> None:
    store.stall("get_job")
    store.stall("load_pointers")
    call = asyncio.ensure_future(store.jobs.get_job(BIZ, "j1"))
    await asyncio.sleep(0)
    assert store.armed
    store.heal()
    assert await call is None
    assert (await store.pointers.load_pointers(["p0"])).get("p0") is None, (
        "an unreached stall is gone"
    )
    assert not store.armed


def test_wrapped_methods_keep_their_signature(store: FaultyStore) -> None:
    assert "fence" in inspect.signature(store.scan.claim_due).parameters


async def test_lifecycle_watch_and_attributes_pass_through(
    inner: MemoryStore, store: FaultyStore
) -> None:
    store.fail_randomly(1.0, random.Random(1))
    await store.setup()
    await store.ping()
    assert store.buckets == 60
    assert store.state is inner.state, "anything else is the wrapped store's"
    watch = store.scan.watch_seconds()
    assert watch is not None
    await watch.aclose()  # type: ignore[attr-defined]
    await store.close()
    assert inner.closed
    assert store.injected == []


async def test_it_wraps_a_recording_store_and_a_fault_before_never_reaches_it() -> None:
    recorder = recording(MemoryStore())
    store = FaultyStore(recorder)  # type: ignore[arg-type]
    store.fail("load_pointers", when="before")
    store.fail("load_pointers", when="after")
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            (await store.pointers.load_pointers(["p0"])).get("p0")
    assert recorder.ops["load_pointers"] == 1, recorder.ops
