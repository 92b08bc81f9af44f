"""Broker membership: each broker's heartbeat of what it holds and consumes, and the
biz types' token buckets a broker takes to send and leaves when it lets go."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.dispatch import BrokerBeat, BucketTaken, HeldBiz


class BrokersPort(Protocol):
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

    async def own_biz_type(self, biz_type: str, broker_id: str) -> int:
        """`broker_id` takes the stream of `biz_type`: a new ownership epoch, above
        every earlier one of that biz type, which its send marks then carry
        (`SendRef.epoch`); a mark under an earlier epoch applies nowhere from now on
        (`outcomes.start_sending`). A retry after a lost reply takes another epoch."""
        ...

    async def take_bucket(self, biz_type: str, taker: str, now_ms: int) -> BucketTaken | None:
        """`taker` (one lane of one broker) starts sending for `biz_type`: its token
        bucket is marked taken by it, not left, and answered as it was before (None: no
        such biz type). `now_ms`: the caller's clock, where the store keeps none."""
        ...

    async def leave_bucket(
        self, biz_type: str, taker: str, tokens: float | None, now_ms: int
    ) -> None:
        """`taker` sends nothing more for `biz_type`: its bucket holds `tokens` (None:
        unlimited) as this write applies, on the store's clock. When another taker took
        the bucket since, that one's state is marked not left instead (this taker may
        have sent after it left, on a stream that came back): the next starts empty."""
        ...
