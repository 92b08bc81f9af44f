"""In-memory claim rounds."""

from __future__ import annotations

from collections.abc import Collection

from timer_service.store.memory.scope import Scoped


class MemoryRounds(Scoped):
    async def open_round(
        self, claim: str, fence: int, now_ms: int, closing: Collection[str] = ()
    ) -> None:
        self._s.rounds[claim] = (now_ms, fence)
        await self.close_rounds(closing)

    async def close_rounds(self, claims: Collection[str]) -> None:
        for claim in claims:
            self._s.rounds.pop(claim, None)
