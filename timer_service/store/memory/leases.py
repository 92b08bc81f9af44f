"""In-memory partition leases."""

from __future__ import annotations

from collections.abc import Sequence

from timer_service.dispatch import LeaseState
from timer_service.store.memory.state import Lease, MemoryState


class MemoryLeases:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

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
            await self._release_lease(name, holder, token)

    async def _release_lease(self, name: str, holder: str, token: int) -> None:
        lease = self._s.leases.get(name)
        if lease is not None and lease.holder == holder and lease.token == token:
            lease.expires_at = 0

    async def list_leases(self, prefix: str) -> list[LeaseState]:
        return [
            LeaseState(name, lease.holder, lease.token, lease.expires_at)
            for name, lease in sorted(self._s.leases.items())
            if name.startswith(prefix)
        ]
