"""The partition leases give up a call whose answer could no longer help, so a reply
stuck on a slow store never keeps a daemon from trying again, and leadership ends at
the lease's deadline, not when a late answer says so (daemon/partition_lease.py)."""

from __future__ import annotations

from daemon.partition_lease import PartitionLeases
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.store.faulty import FaultyStore
from timer_service.store.memory import MemoryStore

TTL_MS = 3000


def keeper() -> tuple[PartitionLeases, FaultyStore, FakeClock, Metrics]:
    store = FaultyStore(MemoryStore(buckets=60, retention_ms=86_400_000))
    clock, metrics = FakeClock(), Metrics()
    return PartitionLeases(store.leases, clock, metrics, "d1", TTL_MS, 1), store, clock, metrics


def errors(metrics: Metrics, operation: str) -> float:
    value = metrics.registry.get_sample_value("timer_store_errors_total", {"operation": operation})
    return value or 0.0


async def test_a_stalled_renew_is_given_up_and_leadership_ends_at_the_deadline() -> None:
    lease, store, clock, metrics = keeper()
    await lease.tick()
    fence = lease.fence
    assert fence is not None, "expected the lease taken"
    clock.advance(TTL_MS // 3)
    store.stall("renew_leases")
    started = clock.now_ms()
    await clock.drive(lease.tick(), within_ms=2 * TTL_MS)
    waited_ms = clock.now_ms() - started
    assert waited_ms == TTL_MS, f"expected the renew given up after a TTL, got {waited_ms} ms"
    assert errors(metrics, "renew_lease") == 1
    assert not lease.is_leader, "expected no leadership past the deadline"
    await lease.tick()  # the store answers again: the same holder takes its lease back
    assert lease.is_leader and lease.fence is not None and lease.fence >= fence


async def test_a_stalled_acquire_is_given_up_after_a_ttl() -> None:
    lease, store, clock, metrics = keeper()
    store.stall("acquire_leases")
    started = clock.now_ms()
    await clock.drive(lease.tick(), within_ms=2 * TTL_MS)
    assert clock.now_ms() - started == TTL_MS, f"waited {clock.now_ms() - started} ms"
    assert errors(metrics, "renew_lease") == 1
    clock.advance(TTL_MS)
    await clock.drive(lease.tick(), within_ms=TTL_MS)
    assert lease.is_leader, "expected the next acquire to take the lease"
