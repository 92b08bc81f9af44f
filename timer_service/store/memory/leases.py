"""In-memory leases, pointers and broker heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from timer_service.dispatch import BrokerBeat, HeldBiz, LeaseState
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

    async def next_fence(self, above: int) -> int:
        self._s.fence_counter = max(self._s.fence_counter, above) + 1
        return self._s.fence_counter

    async def acquire_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        taken = []
        for name in names:
            lease = self._s.leases.get(name)
            if lease is not None and (
                lease.token > token or (lease.holder != holder and lease.expires_at >= now_ms)
            ):
                continue
            self._s.leases[name] = Lease(holder, token, now_ms + ttl_ms)
            taken.append(name)
        return taken

    async def renew_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        held = []
        for name in names:
            lease = self._s.leases.get(name)
            if lease is not None and lease.holder == holder and lease.token == token:
                lease.expires_at = now_ms + ttl_ms
                held.append(name)
        return held

    async def release_leases(self, names: Sequence[str], holder: str, token: int) -> None:
        for name in names:
            await self.release_lease(name, holder, token)

    async def list_leases(self, prefix: str) -> list[LeaseState]:
        return [
            LeaseState(name, lease.holder, lease.token, lease.expires_at)
            for name, lease in sorted(self._s.leases.items())
            if name.startswith(prefix)
        ]

    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        return {n: self._s.pointers[n][0] for n in names if n in self._s.pointers}

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        saved = [await self.save_pointer(name, second, fence) for name in names]
        return all(saved)

    async def broker_heartbeat(
        self,
        broker_id: str,
        held: Sequence[HeldBiz],
        now_ms: int,
        ttl_ms: int,
        consuming: Sequence[str] = (),
    ) -> int:
        ordered = tuple(sorted(held, key=lambda h: h.biz_type))
        clock = self._s.clock
        store_ms = now_ms if clock is None else clock.now_ms()
        self._s.brokers[broker_id] = BrokerBeat(
            broker_id, store_ms + ttl_ms, ordered, tuple(sorted(consuming))
        )
        return store_ms

    async def broker_beats(self) -> list[BrokerBeat]:
        clock = self._s.clock
        read_at = None if clock is None else clock.now_ms()
        return [replace(beat, read_at=read_at) for beat in self._s.brokers.values()]

    async def broker_gone(self, broker_id: str) -> None:
        self._s.brokers.pop(broker_id, None)
