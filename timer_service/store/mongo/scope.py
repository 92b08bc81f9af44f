"""The partitions one daemon process works on, shared by its MongoDB ports.

`ScanPort.own` sets them; the scan, rounds, reconcile and sweep ports of the same
store read them, so a daemon's recovery never touches another daemon's jobs.
"""

from __future__ import annotations

from collections.abc import Collection

from timer_service.partitions import is_all, with_legacy
from timer_service.store.mongo.layout import Doc, Layout


class Scope:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owned: list[int] | None = None  # None: every partition, no filter

    def own(self, partitions: Collection[int] | None) -> None:
        owned = None if partitions is None else sorted(partitions)
        self.owned = None if is_all(owned, self.partitions) else owned


class Scoped:
    """A port over the layout that keeps to its store's `Scope`."""

    def __init__(self, layout: Layout, scope: Scope) -> None:
        self._l = layout
        self._scope = scope

    @property
    def _owned(self) -> list[int] | None:
        return self._scope.owned

    def _partitions(self) -> list[int]:
        return list(range(self._l.partitions)) if self._owned is None else self._owned

    def _scoped(self, query: Doc) -> Doc:
        """`query` limited to the owned partitions (a job without the field: 0)."""
        if self._owned is None:
            return query
        return {**query, "partition": {"$in": with_legacy(self._owned)}}
