"""The partitions one daemon process works on, shared by its in-memory ports.

`ScanPort.own` sets them; the scan, rounds, reconcile and sweep ports of the same
store read them, so a daemon's recovery never touches another daemon's jobs.
"""

from __future__ import annotations

from collections.abc import Collection

from timer_service.partitions import partition_of_slot
from timer_service.store.memory.state import MemoryState


class Scope:
    def __init__(self) -> None:
        self.owned: frozenset[int] | None = None  # None: every partition

    def own(self, partitions: Collection[int] | None) -> None:
        self.owned = None if partitions is None else frozenset(partitions)


class Scoped:
    """A port over the shared state that keeps to its store's `Scope`."""

    def __init__(self, state: MemoryState, scope: Scope) -> None:
        self._s = state
        self._scope = scope

    @property
    def _owned(self) -> frozenset[int] | None:
        return self._scope.owned

    def _partitions(self) -> list[int]:
        if self._owned is None:
            return list(range(self._s.partitions))
        return sorted(self._owned)

    def _mine(self, key: str) -> bool:
        return self._owned is None or self._s.partition(key) in self._owned

    def _owns_slot(self, at: int) -> bool:
        return self._owned is None or partition_of_slot(at) in self._owned
