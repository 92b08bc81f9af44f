"""The store contract for the broker's send mark and the daemon's claim rounds: what a
200 cancel and an unpublished claim rely on (docs/architecture.md, "Claim rounds",
"Lanes"). Runs against every adapter."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef
from timer_service.jobs import CARRIED_PAYLOAD_CHARS
from timer_service.model import Job, second_of
from timer_service.queue.base import decode, encode
from timer_service.store.base import Store
from timer_service.tracecontext import TraceContext


async def test_cancel_dispatched_then_the_send_mark_drops_it(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    await store.jobs.cancel_job("orders", "a", NOW)
    assert await store.outcomes.start_sending([ref], "t1", NOW + 1) == {}


async def test_a_retried_send_mark_returns_what_the_first_try_marked(store: Store) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claimed]
    first = await store.outcomes.start_sending(refs, "t1", NOW + 1)
    assert set(first) == {"orders/a", "orders/b"}
    again = await store.outcomes.start_sending(refs, "t1", NOW + 2)  # its reply was lost
    assert set(again) == {"orders/a", "orders/b"}, f"a retry with the same token got {again}"
    assert await store.outcomes.start_sending(refs, "t2", NOW + 3) == {}  # another sender


async def test_a_lone_job_s_retried_send_mark_returns_it(store: Store) -> None:
    # One job is marked by another path on MongoDB (a find-and-modify): same answers.
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    assert set(await store.outcomes.start_sending([ref], "t1", NOW + 1)) == {"orders/a"}
    assert set(await store.outcomes.start_sending([ref], "t1", NOW + 2)) == {"orders/a"}
    assert await store.outcomes.start_sending([ref], "t2", NOW + 3) == {}


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


async def test_a_mark_of_messages_that_carry_their_jobs_answers_the_jobs_as_stored(
    store: Store,
) -> None:
    # The message carries the job as claimed; where the mark took every job of a
    # claim, the store answers those jobs with the mark applied, not read back. They
    # must be what a read would give (but the history, which no message carries).
    trace = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
    labels = (("order", "42"), ("region", "eu"))
    await create(store, new("a", payload={"x": [1, "é"]}, labels=labels, trace=trace), new("b"))
    await create(store, new("c", payload="retried"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [refs_of_messages(c) for c in claimed]
    # "c" has a failed attempt behind it: attempts, last error and history set.
    [c_ref] = [r for r in refs if r.job_id == "c"]
    assert set(await store.outcomes.start_sending([c_ref], "t0", NOW + 1)) == {"orders/c"}
    retry = Outcome(c_ref, OutcomeKind.RETRY, attempt(1, status=503), NOW + 5600)
    await store.outcomes.record_outcomes([retry], NOW + 2)
    claimed = await store.scan.claim_due(second_of(NOW + 5000), NOW + 6000, "c2", 1, NOW + 3)
    refs = [r for r in refs if r.job_id != "c"] + [refs_of_messages(c) for c in claimed]

    marked = await store.outcomes.start_sending(refs, "t1", NOW + 10)
    assert set(marked) == {"orders/a", "orders/b", "orders/c"}
    for key, job in marked.items():
        stored = await store.jobs.get_job(*key.split("/"))
        assert stored is not None
        assert job.evolve(history=()) == stored.evolve(history=()), key
    assert marked["orders/c"].attempts == 1 and marked["orders/c"].last_error


def refs_of_messages(c: Claimed) -> SendRef:
    """The broker's reference to a job, from its message as the queue carries it."""
    m = decode(encode(c))
    return SendRef(m.biz_type, m.job_id, m.second, m.claim, due_at=m.due_at, job=m.job)


async def test_a_mark_of_carried_jobs_leaves_out_one_cancelled_after_its_claim(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"), new("c"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    await store.jobs.cancel_job("orders", "b", NOW + 1)
    marked = await store.outcomes.start_sending(
        [refs_of_messages(c) for c in claimed], "t1", NOW + 2
    )
    assert set(marked) == {"orders/a", "orders/c"}


async def test_a_job_with_a_large_payload_is_read_back_by_its_mark(store: Store) -> None:
    large = "x" * (CARRIED_PAYLOAD_CHARS + 1)
    await create(store, new("big", payload=large), new("small"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = {r.job_id: r for r in (refs_of_messages(c) for c in claimed)}
    assert refs["big"].job is None  # the small one's, on MongoDB (tests/integration)
    marked = await store.outcomes.start_sending(list(refs.values()), "t1", NOW + 2)
    assert marked["orders/big"].payload == large
