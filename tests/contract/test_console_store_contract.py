"""Contract suite of the console's store calls (labels, search, bulk changes, stats),
run against both adapters (see stores.py)."""

from __future__ import annotations

from tests.contract.stores import create, new
from timer_service.jobs import CreateStatus
from timer_service.store.base import Store

# -- labels ---------------------------------------------------------------------------


async def test_labels_round_trip_and_a_repeat_compares_them(store: Store) -> None:
    labels = (("region", "eu-1"), ("tenant", "acme:42"))
    [made] = await create(store, new("a", labels=labels))
    assert made.status == CreateStatus.CREATED and made.job.labels == labels
    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.labels == labels, f"expected {labels}, got {got}"
    [same] = await create(store, new("a", labels=labels))
    assert same.status == CreateStatus.EXISTS, same
    [other] = await create(store, new("a", labels=(("region", "eu-1"),)))
    assert other.status == CreateStatus.CONFLICT, other
    [plain] = await create(store, new("b"))
    listed, _ = await store.jobs.list_jobs("orders", None, 10, None)
    assert [(j.job_id, j.labels) for j in listed] == [("a", labels), ("b", ())], listed
    assert plain.job.labels == ()


async def test_a_repeat_in_one_batch_compares_labels(store: Store) -> None:
    results = await create(
        store, new("a", labels=(("k", "1"),)), new("a", labels=(("k", "1"),)), new("a")
    )
    got = [r.status for r in results]
    expected = [CreateStatus.CREATED, CreateStatus.EXISTS, CreateStatus.CONFLICT]
    assert got == expected, f"expected {expected}, got {got}"
