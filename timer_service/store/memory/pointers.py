"""In-memory time pointers."""

from __future__ import annotations

from collections.abc import Sequence

from timer_service.store.memory.state import MemoryState


class MemoryPointers:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        return {n: self._s.pointers[n][0] for n in names if n in self._s.pointers}

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        saved = [await self._save_pointer(name, second, fence) for name in names]
        return all(saved)

    async def _save_pointer(self, name: str, second: int, fence: int) -> bool:
        found = self._s.pointers.get(name)
        if found is not None and found[1] > fence:
            return False
        self._s.pointers[name] = (second, fence)
        return True
