"""Who holds what: the daemon's lease and time pointer, the brokers' heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


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
        self, broker_id: str, holding: Sequence[str], expires_at_ms: int
    ) -> None:
        """A live broker says which biz types it holds messages of."""
        ...

    async def held_biz_types(self, now_ms: int) -> set[str]: ...

    async def broker_gone(self, broker_id: str) -> None: ...
