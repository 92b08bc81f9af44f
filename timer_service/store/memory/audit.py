"""The in-memory audit log: entries by id, expired after the retention period."""

from __future__ import annotations

import bisect

from timer_service.audit import AuditAction, AuditEntry


class MemoryAudit:
    def __init__(self, retention_ms: int) -> None:
        self._retention_ms = retention_ms
        self._ids: list[str] = []  # ascending
        self._entries: dict[str, AuditEntry] = {}

    async def record(self, entry: AuditEntry) -> None:
        # As a TTL index would: entries past their retention go (measured from the newest).
        while self._ids and self._entries[self._ids[0]].at + self._retention_ms <= entry.at:
            del self._entries[self._ids.pop(0)]
        if entry.id not in self._entries:
            bisect.insort(self._ids, entry.id)
        self._entries[entry.id] = entry

    async def list_entries(
        self, biz_type: str | None, action: AuditAction | None, limit: int, cursor: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        end = bisect.bisect_left(self._ids, cursor) if cursor else len(self._ids)
        items: list[AuditEntry] = []
        for i in range(end - 1, -1, -1):
            entry = self._entries[self._ids[i]]
            if biz_type is not None and entry.biz_type != biz_type:
                continue
            if action is not None and entry.action != action:
                continue
            if len(items) == limit:  # one more exists: the page ends here
                return items, items[-1].id
            items.append(entry)
        return items, None
