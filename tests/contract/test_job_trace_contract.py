"""A job's W3C trace context, kept by both store adapters from its creation through
claims, retries and moves between seconds, to the broker's pre-send mark."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import CreateStatus
from timer_service.model import encode_payload, second_of
from timer_service.store.base import Store
from timer_service.tracecontext import TraceContext

TRACE = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=abc")
BARE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")


async def test_a_job_keeps_its_trace_context_from_create_to_send(store: Store) -> None:
    made, *_ = await create(store, new("a", trace=TRACE), new("b", trace=BARE), new("c"))
    assert made.status is CreateStatus.CREATED and made.job.trace == TRACE
    traces = {j: (await store.jobs.get_job("orders", j)).trace for j in "abc"}  # type: ignore[union-attr]
    assert traces == {"a": TRACE, "b": BARE, "c": None}, f"got {traces}"

    claims = {c.job_id: c for c in await claim_second(store, second_of(NOW + 5000))}
    got = {j: c.traceparent for j, c in claims.items()}
    assert got == {"a": TRACE.traceparent, "b": BARE.traceparent, "c": None}, f"got {got}"
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claims.values()]
    sending = await store.outcomes.start_sending(refs, "s1", NOW + 5000)
    assert sending["orders/a"].trace == TRACE, f"got {sending['orders/a']}"
    assert sending["orders/c"].trace is None, f"got {sending['orders/c']}"


async def test_the_trace_context_survives_retries_reschedules_and_repeated_creates(
    store: Store,
) -> None:
    await create(store, new("a", trace=TRACE))
    [again] = await create(store, new("a", trace=BARE))
    assert again.status is CreateStatus.EXISTS and again.job.trace == TRACE, "a repeat replaced it"

    [c] = await claim_second(store, second_of(NOW + 5000))
    retry_at = NOW + 30_000  # another second, another bucket
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    await store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), retry_at)], NOW + 5000
    )
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.next_attempt_at == retry_at and job.trace == TRACE, f"{job}"

    moved = await store.jobs.reschedule_job("orders", "a", NOW + 90_000, encode_payload(1), NOW)
    assert moved.trace == TRACE
    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.trace == TRACE, f"got {got}"
