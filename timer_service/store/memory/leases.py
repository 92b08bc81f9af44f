"""In-memory leases, pointers and broker heartbeats."""

from __future__ import annotations

from collections.abc import Sequence

from timer_service.dispatch import BrokerBeat, HeldBiz
from timer_service.store.memory.state import Lease, MemoryState


class MemoryLeases:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        lease = self._s.leases.get(name)
        if lease is not None and lease.holder != holder and lease.expires_at >= now_ms:
            return None
        if lease is None:
            lease = self._s.leases[name] = Lease(holder, 1, now_ms + ttl_ms)
        elif lease.holder != holder:
            lease.holder, lease.token = holder, lease.token + 1
        lease.expires_at = now_ms + ttl_ms
        return lease.token

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool:
        lease = self._s.leases.get(name)
        if lease is None or lease.holder != holder or lease.token != token:
            return False
        lease.expires_at = now_ms + ttl_ms
        return True

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        lease = self._s.leases.get(name)
        if lease is not None and lease.holder == holder and lease.token == token:
            lease.expires_at = 0

    async def load_pointer(self, name: str) -> int | None:
        found = self._s.pointers.get(name)
        return found[0] if found else None

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        found = self._s.pointers.get(name)
        if found is not None and found[1] > fence:
            return False
        self._s.pointers[name] = (second, fence)
        return True

    async def broker_heartbeat(
        self, broker_id: str, held: Sequence[HeldBiz], now_ms: int, expires_at_ms: int
    ) -> int:
        ordered = tuple(sorted(held, key=lambda h: h.biz_type))
        self._s.brokers[broker_id] = BrokerBeat(broker_id, expires_at_ms, ordered)
        clock = self._s.clock
        return now_ms if clock is None else clock.now_ms()

    async def broker_beats(self) -> list[BrokerBeat]:
        return list(self._s.brokers.values())

    async def broker_gone(self, broker_id: str) -> None:
        self._s.brokers.pop(broker_id, None)
