"""In-memory broker heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from timer_service.dispatch import BrokerBeat, HeldBiz
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
