"""Lease renewal never waits behind bulk store work (SecantusDB, real time).

The issue's overload run lost and retook the lease 55 times while the store slowed.
Here bulk calls stall: inside the daemon (FaultyStore stalls its claims and loads)
and on the wire (a fault proxy holds every byte of the bulk client's connections),
and the leader keeps its lease all along, because the leases port has a client and
connection pool of its own, shared only with the pointers and brokers ports
(timer_service/store/mongo, `MongoStore`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from daemon.app import Daemon
from daemon.partition_lease import PartitionLeases
from tests.faultproxy import FaultProxy
from tests.integration.test_daemon_integration import settings
from tests.support import SecantusServer, unique_name
from timer_service.clock import SystemClock
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType
from timer_service.queue.memory import MemoryQueue
from timer_service.store.faulty import FaultyStore
from timer_service.store.mongo import MongoStore, lease_client

pytestmark = pytest.mark.integration

# Renewed every 500 ms: a renew that waits 1 s behind anything loses it. The stalled
# calls below never answer, so a renew queued behind one would lose it every time; the
# second of slack is for a loaded machine's event loop (at 600 ms, CI lost it once at
# load 5 on 2 cores, with nothing queued).
TTL_MS = 1500
HOLD_S = 4.5  # three TTLs


def lease_changes(metrics: Metrics) -> dict[str, float]:
    return {
        change: metrics.registry.get_sample_value("timer_lease_changes_total", {"change": change})
        or 0.0
        for change in ("acquired", "lost")
    }


async def hold_for(lease: PartitionLeases, seconds: float) -> list[float]:
    """Tick the keeper as the daemon's lease loop does; the times it was not leader."""
    lapses: list[float] = []
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        await lease.tick()
        if not lease.is_leader:
            lapses.append(round(elapsed, 2))
        await asyncio.sleep(max(0.0, lease.next_action_ms() / 1000 - time.time()))
    return lapses


async def test_stalled_claims_and_loads_do_not_delay_the_daemons_renewals(
    mongo_store: Any, queue_prefix: str
) -> None:
    store = FaultyStore(mongo_store)
    await store.biz_types.put_biz_type(BizType("orders", "http://127.0.0.1:9/cb"))
    now = int(time.time() * 1000)
    await store.jobs.create_jobs(
        [NewJob("orders", f"j{n}", now + 300, "null") for n in range(20)], now
    )
    store.stall("load_second", times=1000)
    store.stall("claim_due", times=1000)
    metrics = Metrics()
    daemon = Daemon(
        settings(queue_prefix, lease_ttl_ms=TTL_MS),
        store,
        MemoryQueue(),
        metrics,
        SystemClock(),
    )
    await daemon.start()
    try:
        deadline = time.monotonic() + 5
        while not daemon.is_leader and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        fence = daemon.fence
        assert fence is not None, "expected the daemon to lead"
        lapses: list[float] = []
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < HOLD_S:
            if daemon.fence != fence:
                lapses.append(round(elapsed, 2))
            await asyncio.sleep(0.02)
        assert store.stalled > 0, "expected the scan to be stuck in a stalled load or claim"
        assert lapses == [], f"expected the lease held for {HOLD_S} s, lapsed at {lapses} s"
        assert lease_changes(metrics) == {"acquired": 1, "lost": 0}, lease_changes(metrics)
    finally:
        store.heal()
        await daemon.stop()


async def test_a_store_connection_that_holds_every_byte_does_not_delay_renewals(
    secantus: SecantusServer,
) -> None:
    db_name = unique_name("leasepool")
    with FaultProxy.from_url(secantus.url) as proxy:
        slow_url = proxy.url_for(secantus.url)
        # The bulk client goes through the proxy; the leases client straight to the store.
        apart = MongoStore(slow_url, db_name, leases_client=lease_client(secantus.url))
        # The old wiring, for contrast: the leases share the bulk client's connections.
        bulk: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            slow_url, serverSelectionTimeoutMS=5000, socketTimeoutMS=60_000
        )
        # A database of its own: its lease is free, only the stalled client stands between.
        shared = MongoStore(slow_url, f"{db_name}-shared", client=bulk, leases_client=bulk)
        try:
            await apart.setup()
            await bulk.admin.command("ping")
            metrics = Metrics()
            apart_lease = PartitionLeases(apart.leases, SystemClock(), metrics, "apart", TTL_MS, 1)
            await apart_lease.tick()
            assert apart_lease.is_leader, "expected the lease taken before the stall"

            proxy.set_mode("stall")
            stuck = [
                asyncio.create_task(store.scan.next_seconds(0, 10**9, 1000))
                for store in (apart, shared)
                for _ in range(4)
            ]
            lapses = await hold_for(apart_lease, HOLD_S)
            assert lapses == [], f"expected the lease held for {HOLD_S} s, lapsed at {lapses} s"
            assert not any(task.done() for task in stuck), "expected the bulk calls stuck"

            shared_lease = PartitionLeases(
                shared.leases, SystemClock(), Metrics(), "shared", TTL_MS, 1
            )
            await shared_lease.tick()
            assert not shared_lease.is_leader, (
                "the contrast failed: a lease on the stalled client was taken"
            )
        finally:
            proxy.set_mode("pass")
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
            await apart.drop_database()
            await apart.close()
            await bulk.close()
