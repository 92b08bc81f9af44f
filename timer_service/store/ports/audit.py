"""The audit log: the API records every operator action and reads them back."""

from __future__ import annotations

from typing import Protocol

from timer_service.audit import AuditAction, AuditEntry


class AuditPort(Protocol):
    async def record(self, entry: AuditEntry) -> None:
        """Keep the entry for the retention period (`TIMER_RETENTION_DAYS`)."""
        ...

    async def list_entries(
        self, biz_type: str | None, action: AuditAction | None, limit: int, cursor: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        """Entries newest first (by id), before `cursor`; the next cursor, or None at
        the end."""
        ...
