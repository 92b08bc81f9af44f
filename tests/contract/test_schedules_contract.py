"""The schedules port (`store.schedules`), run against both adapters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from timer_service.schedules import Catchup, Schedule, ScheduleSpec
from timer_service.store.base import Store
from timer_service.store.ports.schedules import SchedulesPort

NOW = 1_767_225_600_000


@pytest.fixture
def schedules(store: Store) -> SchedulesPort:
    return store.schedules


def schedule(
    schedule_id: str = "daily",
    biz_type: str = "reports",
    next_run_at: int | None = NOW + 1000,
    **spec: Any,
) -> Schedule:
    fields: dict[str, Any] = {"cron": "0 9 * * MON-FRI", "timezone": "Asia/Shanghai"}
    fields.update(spec)
    return Schedule(
        biz_type=biz_type,
        schedule_id=schedule_id,
        spec=ScheduleSpec(**fields),
        anchor_at=NOW,
        next_run_at=next_run_at,
        created_at=NOW,
        updated_at=NOW,
    )


async def test_put_get_round_trips_every_field(schedules: SchedulesPort) -> None:
    cron = schedule(payload_json='{"a":1}', start_at=NOW, end_at=NOW + 10, max_runs=3)
    cron = cron.evolve(spec=ScheduleSpec(**{**_spec_fields(cron.spec), "catchup": Catchup.ALL}))
    intervals = schedule("every", intervals_ms=(500, 1000), cycle=True, timezone=None, cron=None)
    assert await schedules.put(cron) is None
    assert await schedules.put(intervals) is None
    got = await schedules.get(cron.key)
    assert got == cron, f"expected {cron}, got {got}"
    assert await schedules.get(intervals.key) == intervals
    assert await schedules.get("reports/nope") is None


def _spec_fields(spec: ScheduleSpec) -> dict[str, Any]:
    names = ("cron", "timezone", "intervals_ms", "cycle", "payload_json", "start_at", "end_at")
    extra = ("max_runs", "paused", "catchup")
    return {name: getattr(spec, name) for name in names + extra}


async def test_replace_keeps_counters_and_returns_the_previous(
    schedules: SchedulesPort,
) -> None:
    first = schedule()
    await schedules.put(first)
    assert await schedules.advance(first.key, NOW + 1000, NOW + 2000, "daily:x", NOW + 1000)
    replacement = schedule(next_run_at=NOW + 5000).evolve(created_at=NOW + 9, updated_at=NOW + 9)
    before = await schedules.put(replacement)
    assert before is not None and before.next_run_at == NOW + 2000 and before.runs == 1
    got = await schedules.get(first.key)
    assert got is not None
    assert (got.runs, got.last_run_at, got.last_job_id, got.created_at) == (
        1,
        NOW + 1000,
        "daily:x",
        NOW,
    ), f"counters not kept: {got}"
    assert (got.next_run_at, got.updated_at) == (NOW + 5000, NOW + 9)


async def test_advance_applies_once_and_only_forward(schedules: SchedulesPort) -> None:
    s = schedule()
    await schedules.put(s)
    results = await asyncio.gather(
        *(schedules.advance(s.key, NOW + 1000, NOW + 2000, "daily:1", NOW) for _ in range(5))
    )
    assert sorted(results) == [False] * 4 + [True], f"expected exactly one, got {results}"
    assert not await schedules.advance(s.key, NOW + 1000, NOW + 3000, "daily:1", NOW)
    with pytest.raises(ValueError):
        await schedules.advance(s.key, NOW + 2000, NOW + 2000, "daily:2", NOW)
    assert await schedules.advance(s.key, NOW + 2000, None, "daily:2", NOW + 2000)
    got = await schedules.get(s.key)
    assert got is not None
    assert (got.next_run_at, got.runs, got.last_run_at, got.last_job_id, got.updated_at) == (
        None,
        2,
        NOW + 2000,
        "daily:2",
        NOW + 2000,
    )
    assert not await schedules.advance("reports/nope", NOW, NOW + 1, "nope:1", NOW)


async def test_advance_skips_a_paused_schedule(schedules: SchedulesPort) -> None:
    s = schedule(paused=True)
    await schedules.put(s)
    assert not await schedules.advance(s.key, NOW + 1000, NOW + 2000, "daily:1", NOW)


async def test_delete_list_get_many(schedules: SchedulesPort) -> None:
    for sid, biz in [("b", "reports"), ("a", "reports"), ("c", "other")]:
        await schedules.put(schedule(sid, biz))
    assert [s.schedule_id for s in await schedules.list("reports")] == ["a", "b"]
    assert [s.key for s in await schedules.list(None)] == ["other/c", "reports/a", "reports/b"]
    many = await schedules.get_many(["reports/a", "other/c", "reports/zzz"])
    assert sorted(many) == ["other/c", "reports/a"]
    removed = await schedules.delete("reports/a")
    assert removed is not None and removed.schedule_id == "a"
    assert await schedules.delete("reports/a") is None
    assert [s.schedule_id for s in await schedules.list("reports")] == ["b"]


async def test_stale_finds_schedules_behind_by_next_run_at(schedules: SchedulesPort) -> None:
    await schedules.put(schedule("late", next_run_at=NOW - 5000))
    await schedules.put(schedule("later", next_run_at=NOW - 9000))
    await schedules.put(schedule("fine", next_run_at=NOW + 5000))
    await schedules.put(schedule("over", next_run_at=None))
    got = [s.schedule_id for s in await schedules.stale(NOW, 10)]
    assert got == ["later", "late"], f"expected oldest first, got {got}"
    assert [s.schedule_id for s in await schedules.stale(NOW, 1)] == ["later"]
