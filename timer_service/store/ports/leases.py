"""Who holds what: the daemon's lease and time pointer, the brokers' heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import BrokerBeat, HeldBiz


class LeasesPort(Protocol):
    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        """Take or renew the lease; the fencing token when held, else None. A takeover
        increases the token."""
        ...

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool: ...

    async def release_lease(self, name: str, holder: str, token: int) -> None: ...

    async def load_pointer(self, name: str) -> int | None: ...

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        """False when a holder with a higher fence has written it."""
        ...

    async def broker_heartbeat(
        self, broker_id: str, held: Sequence[HeldBiz], now_ms: int, expires_at_ms: int
    ) -> int:
        """A live broker says what it holds, per biz type; the store's own clock at the
        write (epoch ms), which the broker's skew guard learns from (`now_ms`, the
        caller's clock, where the store keeps no clock of its own)."""
        ...

    async def broker_beats(self) -> list[BrokerBeat]:
        """Every broker's last heartbeat, lapsed ones included (until `broker_gone`)."""
        ...

    async def broker_gone(self, broker_id: str) -> None: ...
