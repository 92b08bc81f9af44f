"""The partition leases give up a call whose answer could no longer help, so a reply
stuck on a slow store never keeps a daemon from trying again, and leadership ends at
the lease's deadline, not when a late answer says so (daemon/partition_lease.py)."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def test_a_gain_under_way_at_release_leaves_no_lease_behind() -> None:
    """A stopping daemon released its leases while its lease loop was still taking
    partitions (just handed back by another daemon); what that gain got stayed in the
    stopped daemon's name until it lapsed, and its partitions went unworked meanwhile."""
    inner = MemoryStore(buckets=60, retention_ms=86_400_000)
    entered, gate = asyncio.Event(), asyncio.Event()

    class GatedLeases:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner.leases, name)

        async def acquire_leases(self, names: list[str], *args: Any) -> list[str]:
            if len(names) > 1:  # a gain (partitions and the heartbeat), not the beat alone
                entered.set()
                await gate.wait()
            return list(await inner.leases.acquire_leases(names, *args))

    clock = FakeClock()
    lease = PartitionLeases(GatedLeases(), clock, Metrics(), "d1", TTL_MS, 2)  # type: ignore[arg-type]
    tick = asyncio.create_task(lease.tick())
    await entered.wait()
    await lease.release()  # the daemon stops while its gain is on the way
    gate.set()
    await tick
    now = clock.now_ms()
    left = [t.name for t in await inner.leases.list_leases("daemon-") if t.expires_at > now]
    assert left == [], f"still held in the stopped daemon's name: {left}"
    await lease.tick()
    assert not lease.is_leader and lease.owned == frozenset()
