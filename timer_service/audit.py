"""The audit log's entries: who did what to which biz type, when (docs/api.md, "Audit").

An entry's id sorts by time (epoch ms first, then a sequence number, then a random
tail), so the newest entries come first in reverse id order and an id is the cursor
to go on from.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any


class AuditAction(StrEnum):
    JOB_CANCEL = "job.cancel"
    JOB_REPLAY = "job.replay"
    JOB_RESCHEDULE = "job.reschedule"
    JOBS_BULK_CANCEL = "jobs.bulk_cancel"
    JOBS_BULK_REPLAY = "jobs.bulk_replay"
    BIZ_TYPE_PUT = "biz_type.put"
    BIZ_TYPE_PATCH = "biz_type.patch"
    BIZ_TYPE_DELETE = "biz_type.delete"
    BIZ_TYPE_ROTATE_SECRET = "biz_type.rotate_secret"
    SCHEDULE_PUT = "schedule.put"
    SCHEDULE_DELETE = "schedule.delete"
    SCHEDULE_RUN_NOW = "schedule.run_now"
    SCHEDULE_SKIP_NEXT = "schedule.skip_next"
    TOKEN_CREATE = "token.create"
    TOKEN_DELETE = "token.delete"


# The biz type of an entry about no one biz type (a token): every biz type. Only a token
# that covers every biz type sees such entries.
ALL_BIZ_TYPES = "*"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str
    at: int
    actor: str
    action: AuditAction
    biz_type: str
    job_id: str | None = None
    filter: dict[str, Any] | None = None
    count: int | None = None
    detail: dict[str, Any] | None = None

    def to_public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action.value,
            "biz_type": self.biz_type,
            "job_id": self.job_id,
            "filter": self.filter,
            "count": self.count,
            "detail": self.detail,
        }

    @classmethod
    def from_public(cls, d: dict[str, Any]) -> AuditEntry:
        return cls(
            id=d["id"],
            at=d["at"],
            actor=d["actor"],
            action=AuditAction(d["action"]),
            biz_type=d["biz_type"],
            job_id=d.get("job_id"),
            filter=d.get("filter"),
            count=d.get("count"),
            detail=d.get("detail"),
        )


_sequence = itertools.count()


def entry_id(at_ms: int) -> str:
    """A new entry's id: sorts by `at_ms`, then (within one process) by the order of
    recording; the random tail makes it unique across processes."""
    return f"{at_ms:013d}-{next(_sequence) % 16**10:010x}-{secrets.token_hex(4)}"


def new_entry(
    at_ms: int,
    actor: str,
    action: AuditAction,
    biz_type: str,
    *,
    job_id: str | None = None,
    filter: dict[str, Any] | None = None,
    count: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    entry = AuditEntry(entry_id(at_ms), at_ms, actor, action, biz_type, job_id, filter, count)
    return entry if detail is None else replace(entry, detail=detail)
