"""In-memory broker heartbeats and the biz types' bucket states."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from timer_service.dispatch import BrokerBeat, BucketTaken, HeldBiz
from timer_service.store.memory.state import MemoryState


class MemoryBrokers:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

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

    async def own_biz_type(self, biz_type: str, broker_id: str) -> int:
        epoch = self._s.epochs.get(biz_type, 0) + 1
        self._s.epochs[biz_type] = epoch
        return epoch

    async def take_bucket(self, biz_type: str, taker: str, now_ms: int) -> BucketTaken | None:
        if biz_type not in self._s.biz:
            return None
        clock = self._s.clock
        store_ms = now_ms if clock is None else clock.now_ms()
        was = self._s.rate_states.get(biz_type)
        self._s.rate_states[biz_type] = (taker, None, None)
        if was is None:
            return BucketTaken(store_ms, was_taken=False)
        _, left_at, tokens = was
        return BucketTaken(store_ms, was_taken=True, left_at=left_at, left_tokens=tokens)

    async def leave_bucket(
        self, biz_type: str, taker: str, tokens: float | None, now_ms: int
    ) -> None:
        was = self._s.rate_states.get(biz_type)
        if was is None or biz_type not in self._s.biz:
            return
        if was[0] != taker:
            self._s.rate_states[biz_type] = (was[0], None, None)
            return
        clock = self._s.clock
        store_ms = now_ms if clock is None else clock.now_ms()
        self._s.rate_states[biz_type] = (taker, store_ms, tokens)
