"""Deleting a biz type against creates of its jobs, on both adapters (issue 30, break
7): a create checks its biz type, then writes; a delete checks for jobs, then deletes.
Each side's check could pass before the other's write, and both succeeded: a 201 job
of a deleted biz type, republished for ever into a queue nobody consumes. Found by the
simulation (`tests/sim/workload.py`, `_deletes`): seed 1, the first CI seed.

Now a create checks its biz types again after its write (`Registrar`,
`BizTypesPort.keep_biz_types`) and a delete marks the biz type before it checks for
jobs, so one of the two always sees the other (docs/architecture.md, "Deleting a biz
type")."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.contract.stores import NOW, new
from tests.contract.test_jobs_contract import dead_job
from timer_service.biz_hold import deleted_meanwhile
from timer_service.errors import Conflict, InvalidInput
from timer_service.jobs import CreateResult, CreateStatus
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState
from timer_service.registration import Registrar
from timer_service.store.base import Store
from timer_service.store.ports.biz_types import BizTypesPort

ORDERS = BizType("orders", "http://127.0.0.1:1/cb", created_at=1, updated_at=1)


class DeletedAfterTheCheck:
    """The biz types port, with a delete of each biz type landing right after the
    create's first check answered: the interleaving of break 7."""

    def __init__(self, store: Store) -> None:
        self._port: BizTypesPort = store.biz_types

    def __getattr__(self, name: str) -> object:
        return getattr(self._port, name)

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]:
        known = await self._port.get_biz_types(names)
        for name in names:
            assert await self._port.delete_biz_type(name) is True
        return known


async def test_a_create_whose_biz_type_is_deleted_after_its_check_is_refused(
    store: Store,
) -> None:
    await store.biz_types.put_biz_type(ORDERS)
    racing = Registrar(store.jobs, Metrics(), biz_types=DeletedAfterTheCheck(store))  # type: ignore[arg-type]

    [result] = await racing.register([new("a", due_at=NOW)], NOW)

    assert isinstance(result, InvalidInput), f"expected unknown biz type, got {result}"
    assert await store.biz_types.get_biz_type("orders") is None
    job = await store.jobs.get_job("orders", "a")
    # Written, then withdrawn: nothing of a deleted biz type is left to fire.
    assert job is None or job.state == JobState.CANCELLED, job
    assert await store.scan.claim_due(NOW // 1000, NOW + 999, "c1", 1, NOW) == []


async def test_a_delete_after_the_create_s_write_waits_for_its_jobs(store: Store) -> None:
    await store.biz_types.put_biz_type(ORDERS)
    registrar = Registrar(store.jobs, Metrics(), biz_types=store.biz_types)
    [result] = await registrar.register([new("a")], NOW)
    assert isinstance(result, CreateResult) and result.status == CreateStatus.CREATED

    with pytest.raises(Conflict):
        await store.biz_types.delete_biz_type("orders")

    assert await store.biz_types.get_biz_type("orders") is not None
    assert await store.biz_types.keep_biz_types(["orders", "nope"]) == {"orders"}
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.PENDING, job


async def test_a_withdrawn_job_is_cancelled_whatever_its_claim(store: Store) -> None:
    """What a create whose delete won does to what it wrote: the job is cancelled even
    if the daemon claimed it meanwhile; a final job is left alone."""
    await store.biz_types.put_biz_type(ORDERS)
    [a] = await store.jobs.create_jobs([new("a", due_at=NOW)], NOW)
    [b] = await store.jobs.create_jobs([new("b", due_at=NOW)], NOW)
    await store.scan.claim_due(NOW // 1000, NOW + 999, "c1", 1, NOW)
    await store.jobs.cancel_job("orders", "b", NOW)

    await store.jobs.withdraw_jobs([a.job, b.job], NOW + 1)

    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.state == JobState.CANCELLED, got
    assert got.last_error is not None and "deleted" in got.last_error, got
    other = await store.jobs.get_job("orders", "b")
    assert other is not None and other.state == JobState.CANCELLED and other.last_error is None


async def test_a_replay_whose_biz_type_is_deleted_meanwhile_is_withdrawn(store: Store) -> None:
    """The same race with a replay: a dead job made pending after the delete looked for
    active jobs. The replay's read after its write finds the biz type gone and withdraws
    the job (the API answers 404); nothing of the deleted biz type is left to fire."""
    await store.biz_types.put_biz_type(ORDERS)
    await dead_job(store, "a")
    assert await store.biz_types.delete_biz_type("orders") is True  # dead jobs do not block
    replayed = await store.jobs.replay_job("orders", "a", NOW + 6000)
    assert replayed.state == JobState.PENDING

    gone = await deleted_meanwhile(store.biz_types, store.jobs, ["orders"], [replayed], NOW + 6001)

    assert gone == {"orders"}
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.CANCELLED, job
