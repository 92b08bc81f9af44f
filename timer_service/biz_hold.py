"""A write that makes jobs of a biz type active (a create, a replay) against a delete
of that biz type (issue 30, break 7).

Both sides write first and read what the other writes after: the delete marks the
biz type, then looks for its active jobs; the writer writes its jobs, then reads its
biz types (`BizTypesPort.keep_biz_types`), taking a delete's mark away. If the
writer's read finds the biz type unmarked, it came before the mark, so the delete's
look finds the jobs; if it finds the biz type gone, the delete's look came before
the write, and the writer withdraws what it wrote (`jobs.withdraw`). Either way no
active job is left of a deleted biz type (docs/architecture.md, "Deleting a biz
type").
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from timer_service.model import Job
from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.jobs import JobsPort

log = logging.getLogger(__name__)


async def deleted_meanwhile(
    biz_types: BizTypesPort,
    jobs: JobsPort,
    names: Collection[str],
    written: Sequence[Job],
    now_ms: int,
) -> set[str]:
    """Those of `names` deleted since the caller checked them; the `written` jobs (what
    the caller made active) of those are withdrawn. Called after the write."""
    if not names:
        return set()
    gone = set(names) - await biz_types.keep_biz_types(sorted(names))
    if gone:
        await jobs.withdraw_jobs([job for job in written if job.biz_type in gone], now_ms)
        log.info(
            "jobs withdrawn: their biz type was deleted meanwhile", extra={"gone": sorted(gone)}
        )
    return gone
