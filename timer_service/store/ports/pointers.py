"""The daemon's time pointers: how far each partition's scan got, fenced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class PointersPort(Protocol):
    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        """The saved pointers among these names (a name never saved is left out)."""
        ...

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        """Save `second` as the pointer of every name, in one write, unless a holder
        with a higher fence has written it; False when any was so written."""
        ...
