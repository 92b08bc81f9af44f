"""Who holds what: the daemon's lease and time pointer, the brokers' heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import BrokerBeat, HeldBiz, LeaseState


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

    # -- a set of leases under one fence (the daemon's partitions) -----------------
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

    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        """The saved pointers among these names (a name never saved is left out)."""
        ...

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        """`save_pointer` for every name, in one write; False when any was written by a
        holder with a higher fence."""
        ...

    async def broker_heartbeat(
        self,
        broker_id: str,
        held: Sequence[HeldBiz],
        now_ms: int,
        ttl_ms: int,
        consuming: Sequence[str] = (),
    ) -> int:
        """A live broker says what it holds, per biz type, and which biz types it
        consumes; alive until `ttl_ms` after the store applies the write, by the
        store's clock (a beat that waited in a busy store is as fresh as when it
        landed). Returns the store's clock at the write (epoch ms), which the broker's
        skew guard learns from (`now_ms`, the caller's clock, where the store keeps no
        clock of its own)."""
        ...

    async def broker_beats(self) -> list[BrokerBeat]:
        """Every broker's last heartbeat, lapsed ones included (until `broker_gone`),
        each with the store's clock at the read (`BrokerBeat.read_at`)."""
        ...

    async def broker_gone(self, broker_id: str) -> None: ...
