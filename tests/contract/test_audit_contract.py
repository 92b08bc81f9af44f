"""The audit port (`store.audit`), on both adapters."""

from __future__ import annotations

from tests.contract.stores import NOW
from timer_service.audit import AuditAction, AuditEntry, new_entry
from timer_service.store.base import Store


async def test_audit_entries_newest_first_filtered_and_paged(store: Store) -> None:
    actions = [AuditAction.BIZ_TYPE_PUT, AuditAction.JOB_CANCEL, AuditAction.JOBS_BULK_REPLAY]
    made = []
    for i in range(9):
        entry = new_entry(
            NOW + i,
            "ops",
            actions[i % 3],
            "orders" if i % 2 == 0 else "billing",
            job_id=f"j{i}" if actions[i % 3] is AuditAction.JOB_CANCEL else None,
            filter={"biz_type": "orders", "labels": {"k": "v"}} if i % 3 == 2 else None,
            count=i if i % 3 == 2 else None,
            detail={"paused": True} if i == 0 else None,
        )
        await store.audit.record(entry)
        made.append(entry)
    newest_first = list(reversed(made))
    for biz_type, action in [
        (None, None),
        ("orders", None),
        (None, actions[1]),
        ("billing", actions[2]),
    ]:
        expected = [
            e
            for e in newest_first
            if (biz_type is None or e.biz_type == biz_type)
            and (action is None or e.action == action)
        ]
        for limit in (1, 2, 100):
            got: list[AuditEntry] = []
            cursor = None
            while True:
                page, cursor = await store.audit.list_entries(biz_type, action, limit, cursor)
                got += page
                if cursor is None:
                    break
            assert got == expected, f"{biz_type}/{action}, limit {limit}: {got} != {expected}"
