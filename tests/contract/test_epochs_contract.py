"""Ownership epochs (`brokers.own_biz_type`) and the send mark they fence
(`outcomes.start_sending`), on every store: a broker that lost a biz type's stream
(frozen, cut off from the store) marks nothing of it (issue 30, break 9)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.stores import NOW, claim_second, create, new
from timer_service.dispatch import SendRef
from timer_service.errors import StaleEpoch
from timer_service.model import JobState, second_of
from timer_service.store.base import Store


async def _refs(store: Store, *job_ids: str) -> list[SendRef]:
    await create(store, *(new(j) for j in job_ids))
    claimed = await claim_second(store, second_of(NOW + 5000))
    return [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]


async def test_each_take_of_a_biz_type_is_a_new_higher_epoch(store: Store) -> None:
    first = await store.brokers.own_biz_type("orders", "b1")
    second = await store.brokers.own_biz_type("orders", "b2")
    again = await store.brokers.own_biz_type("orders", "b1")
    assert first < second < again, (first, second, again)
    assert await store.brokers.own_biz_type("coupons", "b1") >= 1  # each its own


@pytest.mark.parametrize("jobs", [("a",), ("a", "b")], ids=["one job", "a batch"])
async def test_a_mark_under_a_stale_epoch_marks_nothing(
    store: Store, jobs: tuple[str, ...]
) -> None:
    """The old owner's mark, once another broker took the stream: refused whole, and
    the new owner marks the same jobs under its epoch."""
    old = await store.brokers.own_biz_type("orders", "b1")
    refs = await _refs(store, *jobs)
    new_epoch = await store.brokers.own_biz_type("orders", "b2")
    with pytest.raises(StaleEpoch) as refused:
        await store.outcomes.start_sending([replace(r, epoch=old) for r in refs], "b1/t", NOW)
    assert refused.value.biz_types == {"orders"}
    for job_id in jobs:
        job = await store.jobs.get_job("orders", job_id)
        assert job is not None and job.state is JobState.DISPATCHED and job.sending is None, job
    marked = await store.outcomes.start_sending(
        [replace(r, epoch=new_epoch) for r in refs], "b2/t", NOW + 1
    )
    assert set(marked) == {f"orders/{j}" for j in jobs}, marked


async def test_a_mark_under_the_current_epoch_or_none_applies(store: Store) -> None:
    epoch = await store.brokers.own_biz_type("orders", "b1")
    a, b = await _refs(store, "a", "b")
    assert set(await store.outcomes.start_sending([replace(a, epoch=epoch)], "t1", NOW)) == {
        "orders/a"
    }
    assert set(await store.outcomes.start_sending([b], "t2", NOW)) == {"orders/b"}


async def test_a_mark_of_a_biz_type_never_owned_under_an_epoch_is_stale(store: Store) -> None:
    [a] = await _refs(store, "a")
    with pytest.raises(StaleEpoch):
        await store.outcomes.start_sending([replace(a, epoch=1)], "t1", NOW)
