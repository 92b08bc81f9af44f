"""Admission control: at most TIMER_API_MAX_INFLIGHT /v1 requests at work; beyond that a
short bounded wait, then 503 + Retry-After, and /readyz not ready while shedding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.api_harness import Api, expect
from timer_service.api.admission import SHEDDING_HOLD_MS, AdmissionGate
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.store.faulty import FaultyStore
from timer_service.store.memory import MemoryStore


def gate(max_inflight: int, max_wait_ms: int) -> tuple[AdmissionGate, FakeClock, Metrics]:
    clock, metrics = FakeClock(), Metrics()
    return AdmissionGate(max_inflight, max_wait_ms, clock, metrics), clock, metrics


async def settle() -> None:
    """A few turns of the loop: a handed-over slot wakes its waiter through the clock's wait."""
    for _ in range(10):
        await asyncio.sleep(0)


def sample(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name) or 0.0


# -- the gate -------------------------------------------------------------------------------------


async def test_beyond_the_bound_a_request_is_refused_at_once_without_a_wait() -> None:
    g, clock, metrics = gate(max_inflight=2, max_wait_ms=0)
    got = [await g.enter(), await g.enter(), await g.enter()]
    assert got == [True, True, False], f"expected two slots then a refusal, got {got}"
    assert (g.inflight, g.shed) == (2, 1), f"expected 2 in flight, 1 shed; got {g.inflight, g.shed}"
    assert sample(metrics, "timer_api_requests_shed_total") == 1
    assert sample(metrics, "timer_api_requests_inflight") == 2
    g.leave(5.0)
    assert await g.enter() is True, "expected the freed slot to be taken"
    assert g.shedding(), "expected shedding right after a refusal"
    clock.advance(SHEDDING_HOLD_MS)
    assert not g.shedding(), f"expected shedding over {SHEDDING_HOLD_MS} ms after the refusal"


async def test_a_waiter_gets_the_next_freed_slot_first_come_first_served() -> None:
    g, _, _ = gate(max_inflight=1, max_wait_ms=1000)
    assert await g.enter()
    first = asyncio.create_task(g.enter())
    second = asyncio.create_task(g.enter())
    await settle()
    assert g.waiting == 2, f"expected 2 waiting, got {g.waiting}"
    g.leave(10.0)
    await settle()
    assert first.done() and first.result() is True, "expected the first waiter admitted"
    assert not second.done(), "expected the second still waiting"
    assert g.inflight == 1, f"a handed-over slot keeps the count at 1, got {g.inflight}"
    g.leave(10.0)
    assert await second is True
    g.leave(10.0)
    assert (g.inflight, g.waiting) == (0, 0), f"expected an idle gate, got {g.inflight, g.waiting}"


async def test_a_waiter_is_refused_when_its_wait_runs_out() -> None:
    g, clock, _ = gate(max_inflight=1, max_wait_ms=1000)
    assert await g.enter()
    waiter = asyncio.create_task(g.enter())
    await clock.run_for(999)
    assert not waiter.done(), "expected the waiter to wait up to 1000 ms"
    await clock.run_for(1)
    assert await waiter is False, "expected a refusal after 1000 ms"
    assert (g.inflight, g.waiting, g.shed) == (1, 0, 1), (g.inflight, g.waiting, g.shed)


async def test_no_more_wait_than_the_slots_can_serve_in_time() -> None:
    g, _, _ = gate(max_inflight=2, max_wait_ms=1000)
    g.hold_ms = 500.0  # two slots at 500 ms each serve 4 waiters within a second
    assert g.max_waiting() == 4, f"expected room for 4 waiters, got {g.max_waiting()}"
    assert await g.enter() and await g.enter()
    waiters = [asyncio.create_task(g.enter()) for _ in range(4)]
    await settle()
    assert await g.enter() is False, "expected the fifth waiter refused at once"
    assert g.retry_after_s() == 2, f"6 requests x 500 ms over 2 slots: 2 s, got {g.retry_after_s()}"
    for _ in range(6):
        g.leave(500.0)
        await settle()
    assert [w.result() for w in waiters] == [True] * 4


async def test_a_cancelled_waiter_leaves_the_queue_and_passes_on_a_slot() -> None:
    g, _, _ = gate(max_inflight=1, max_wait_ms=1000)
    assert await g.enter()
    waiter = asyncio.create_task(g.enter())
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert g.waiting == 0, f"expected the cancelled waiter gone, got {g.waiting} waiting"
    g.leave(1.0)
    assert g.inflight == 0, f"expected the slot freed, got {g.inflight} in flight"


# -- over HTTP ------------------------------------------------------------------------------------


async def stalled_api(make: Callable[..., Any], **settings: Any) -> tuple[Api, FaultyStore]:
    store = FaultyStore(MemoryStore(buckets=60, retention_ms=86_400_000))
    api = await make(store=store, **settings)
    expect(await api.put_biz(), 201)
    return api, store


async def test_a_request_beyond_the_bound_gets_503_with_retry_after_at_once(
    make_api: Callable[..., Any],
) -> None:
    api, store = await stalled_api(make_api, api_max_inflight=2, api_admission_wait_ms=0)
    store.stall("create_jobs", times=2)
    held = [
        asyncio.create_task(api.create(biz_type="orders", job_id=f"held-{i}", delay_ms=60_000))
        for i in range(2)
    ]
    while store.stalled < 2:
        await settle()

    refused = await api.create(biz_type="orders", job_id="refused", delay_ms=60_000)
    problem = expect(refused, 503)
    assert problem["type"] == "/problems/overloaded", problem
    assert int(refused.headers["retry-after"]) >= 1, refused.headers
    expect(await api.request("GET", "/v1/biz-types"), 503)  # every /v1 route is gated
    expect(await api.request("GET", "/healthz"), 200)
    not_ready = await api.request("GET", "/readyz")
    assert expect(not_ready, 503)["type"] == "/problems/overloaded"
    assert "retry-after" in not_ready.headers, not_ready.headers
    metrics = await api.request("GET", "/metrics")
    assert "timer_api_requests_shed_total 2.0" in metrics.text, metrics.text[:300]

    store.resume()
    assert [r.status_code for r in await asyncio.gather(*held)] == [201, 201]
    expect(await api.request("GET", "/v1/jobs/orders/refused"), 404)  # refused changed nothing
    api.clock.advance(SHEDDING_HOLD_MS)
    expect(await api.request("GET", "/readyz"), 200)


async def test_a_request_that_waits_for_a_slot_is_served(make_api: Callable[..., Any]) -> None:
    api, store = await stalled_api(make_api, api_max_inflight=1, api_admission_wait_ms=1000)
    store.stall("create_jobs", times=1)
    held = asyncio.create_task(api.create(biz_type="orders", job_id="held", delay_ms=60_000))
    while store.stalled < 1:
        await settle()
    waiting = asyncio.create_task(api.create(biz_type="orders", job_id="next", delay_ms=60_000))
    await api.clock.run_for(500)
    assert not waiting.done(), "expected the second create to wait for the slot"
    store.resume()
    assert [(await held).status_code, (await waiting).status_code] == [201, 201]
    expect(await api.request("GET", "/readyz"), 200)  # nothing was shed
