"""Claim rounds (`store.rounds`), on both adapters, and what the reconciler reads
of them."""

from __future__ import annotations

from tests.contract.stores import NOW, create, new
from timer_service.dispatch import SendRef
from timer_service.model import Job, second_of
from timer_service.store.base import Store


def ids_of(jobs: list[Job]) -> list[str]:
    return sorted(j.job_id for j in jobs)


async def test_open_rounds_name_the_jobs_never_confirmed(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), new("b"), new("c", due_at=NOW + 5900))
    await store.rounds.open_round("c1", 1, NOW)
    await store.scan.claim_due(s, NOW + 5500, "c1", 1, NOW)  # a and b
    await store.rounds.open_round("c2", 2, NOW + 5)
    await store.scan.claim_due(s, NOW + 6000, "c2", 2, NOW + 5)  # c
    assert await store.reconcile.find_unpublished(NOW, 100) == []  # not old enough yet
    assert ids_of(await store.reconcile.find_unpublished(NOW + 10, 100)) == ["a", "b", "c"]
    assert ids_of(await store.reconcile.find_unpublished(NOW + 10, 100, fence_below=2)) == [
        "a",
        "b",
    ]
    await store.rounds.close_rounds(["c1"])
    assert ids_of(await store.reconcile.find_unpublished(NOW + 10, 100)) == ["c"]
    # A job whose send has started is no longer the round's to republish.
    [c] = await store.reconcile.find_unpublished(NOW + 10, 100)
    assert c.claim is not None
    ref = SendRef(c.biz_type, c.job_id, s, c.claim)
    assert set(await store.outcomes.start_sending([ref], "t", NOW + 20)) == {"orders/c"}
    assert await store.reconcile.find_unpublished(NOW + 10, 100) == []


async def test_a_round_that_names_no_job_is_closed_by_the_sweep(store: Store) -> None:
    await store.rounds.open_round("empty", 1, NOW)
    assert await store.reconcile.find_unpublished(NOW + 10, 100) == []
    # Once closed, a claim under that token is no longer found: the sweep must only
    # close rounds older than any claim still to be made under them (daemon/rounds.py).
    await create(store, new("a"))
    await store.scan.claim_due(second_of(NOW + 5000), NOW + 6000, "empty", 1, NOW + 20)
    assert await store.reconcile.find_unpublished(NOW + 30, 100) == []


async def test_opening_a_round_can_close_others_in_the_same_write(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), new("b", due_at=NOW + 5900))
    await store.rounds.open_round("c1", 1, NOW)
    await store.scan.claim_due(s, NOW + 5500, "c1", 1, NOW)  # a
    await store.rounds.open_round("c2", 1, NOW + 5, closing=["c1", "never-opened"])
    await store.scan.claim_due(s, NOW + 6000, "c2", 1, NOW + 5)  # b
    assert ids_of(await store.reconcile.find_unpublished(NOW + 10, 100)) == ["b"]


async def test_a_claim_is_found_again_by_its_token(store: Store) -> None:
    """What the scanner asks after a claim that raised (issue 30, break 8): the jobs
    of that second still dispatched under the token, as the claim returns them."""
    s = second_of(NOW + 5000)
    await create(store, new("a"), new("b"), new("later", due_at=NOW + 5900))
    claimed = await store.scan.claim_due(s, NOW + 5000, "c1", 1, NOW)
    assert sorted(c.job_id for c in claimed) == ["a", "b"]

    found = await store.scan.find_claim(s, "c1")

    assert sorted((c.job_id, c.claim, c.bucket) for c in found) == sorted(
        (c.job_id, c.claim, c.bucket) for c in claimed
    )
    assert await store.scan.find_claim(s, "c2") == []
    assert await store.scan.find_claim(s + 1, "c1") == []
    await store.jobs.cancel_job("orders", "a", NOW + 1)
    assert [c.job_id for c in await store.scan.find_claim(s, "c1")] == ["b"]
