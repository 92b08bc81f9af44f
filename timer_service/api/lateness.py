"""The job resource's `lateness` (docs/api.md, "Why late"): the state it is judged by,
read only for an open job whose moment has passed, through the store's ports."""

from __future__ import annotations

import asyncio
from typing import Any

from timer_service.api.context import ApiContext
from timer_service.lateness import (
    Surroundings,
    judge,
    lease_of,
    needs_surroundings,
    to_public,
    without_surroundings,
)
from timer_service.model import Job
from timer_service.partitions import lease_name, partition_of, pointer_name


async def job_with_lateness(ctx: ApiContext, job: Job) -> dict[str, Any]:
    """The job as GET shows it: its public fields and `lateness` (null when on time).
    A job on time costs no read beyond its own; a late open one four more, at once."""
    now = ctx.clock.now_ms()
    if not needs_surroundings(job, now):
        return {**job.to_public(), "lateness": to_public(without_surroundings(job, now))}
    store = ctx.store
    partition = partition_of(job.key, ctx.settings.partitions)
    name = lease_name(partition)
    biz, beats, leases, pointers = await asyncio.gather(
        store.biz_types.get_biz_type(job.biz_type),
        store.brokers.broker_beats(),
        store.leases.list_leases(name),
        store.pointers.load_pointers([pointer_name(partition)]),
    )
    around = Surroundings(
        biz=biz,
        beats=beats,
        partition=partition,
        lease=lease_of(leases, name),
        pointer_s=pointers.get(pointer_name(partition)),
        reconcile_after_ms=ctx.settings.reconcile_after_ms,
    )
    now = ctx.clock.now_ms()
    return {**job.to_public(), "lateness": to_public(judge(job, around, now))}
