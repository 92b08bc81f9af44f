"""The daemon's partition leases: a set of leases under one fencing token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import LeaseState


class LeasesPort(Protocol):
    async def next_fence(self, above: int) -> int:
        """A fencing token higher than `above` and than any this call returned before."""
        ...

    async def acquire_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        """Take each of these leases that is free, lapsed or the holder's own, where its
        stored token is not above `token`, setting `token`; the names taken."""
        ...

    async def renew_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        """Extend those still held by `holder` under `token` (one write); their names."""
        ...

    async def release_leases(self, names: Sequence[str], holder: str, token: int) -> None: ...

    async def list_leases(self, prefix: str) -> list[LeaseState]:
        """Every lease whose name starts with `prefix`, lapsed ones included."""
        ...
