"""Recurring schedules, the domain and the Scheduler over in-memory stores, on a FakeClock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.contract.stores import list_jobs
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed
from timer_service.errors import InvalidInput
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState
from timer_service.schedules import (
    MAX_SCHEDULE_ID_LEN,
    Catchup,
    ScheduleSpec,
    check_schedule_id,
    last_occurrence,
    next_occurrence,
    parse_occurrence,
    plan_after,
)
from timer_service.scheduling import Scheduler
from timer_service.store.memory import MemoryStore

UTC = "UTC"
NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"
SYDNEY = "Australia/Sydney"
SHANGHAI = "Asia/Shanghai"


def at(zone: str, *parts: int, fold: int = 0) -> int:
    """Epoch ms of a wall time in `zone` (fold=1: the second pass of a repeated hour)."""
    moment = datetime(*parts, tzinfo=ZoneInfo(zone), fold=fold)  # type: ignore[misc]
    return int(moment.timestamp() * 1000)


def wall(ms: int, zone: str) -> str:
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).isoformat(timespec="milliseconds")


def occurrences(spec: ScheduleSpec, anchor: int, after: int, count: int) -> list[int | None]:
    out: list[int | None] = []
    cursor: int | None = after
    for _ in range(count):
        cursor = None if cursor is None else next_occurrence(spec, anchor, cursor)
        out.append(cursor)
    return out


def expect_walls(got: Sequence[int | None], zone: str, expected: Sequence[str]) -> None:
    walls = [wall(ms, zone) if ms is not None else None for ms in got]
    assert walls == list(expected), f"expected {list(expected)}, got {walls}"


def cron(expr: str, zone: str = UTC, **kw: Any) -> ScheduleSpec:
    return ScheduleSpec(cron=expr, timezone=zone, **kw)


# -- cron across DST --------------------------------------------------------------------


def test_new_york_spring_forward_skipped_time_fires_once_at_three() -> None:
    spec = cron("30 2 * * *", NEW_YORK)
    start = at(NEW_YORK, 2026, 3, 7, 12, 0)
    got = occurrences(spec, start, start, 3)
    expect_walls(
        got,
        NEW_YORK,
        [
            "2026-03-08T03:00:00.000-04:00",  # 02:30 does not exist that day
            "2026-03-09T02:30:00.000-04:00",
            "2026-03-10T02:30:00.000-04:00",
        ],
    )


def test_new_york_spring_forward_gap_times_collapse_into_one_occurrence() -> None:
    spec = cron("*/30 * * * *", NEW_YORK)
    start = at(NEW_YORK, 2026, 3, 8, 1, 0)
    got = occurrences(spec, start, start, 4)
    expect_walls(
        got,
        NEW_YORK,
        [
            "2026-03-08T01:30:00.000-05:00",
            "2026-03-08T03:00:00.000-04:00",  # 02:00, 02:30 and 03:00 fire once
            "2026-03-08T03:30:00.000-04:00",
            "2026-03-08T04:00:00.000-04:00",
        ],
    )


def test_new_york_fall_back_repeated_time_fires_once() -> None:
    spec = cron("30 1 * * *", NEW_YORK)
    start = at(NEW_YORK, 2026, 10, 31, 12, 0)
    got = occurrences(spec, start, start, 2)
    expect_walls(got, NEW_YORK, ["2026-11-01T01:30:00.000-04:00", "2026-11-02T01:30:00.000-05:00"])
    # Asked from inside the second pass of 01:xx, the 01:30 that already fired is not again.
    second_pass = at(NEW_YORK, 2026, 11, 1, 1, 10, fold=1)
    expect_walls(
        [next_occurrence(spec, start, second_pass)], NEW_YORK, ["2026-11-02T01:30:00.000-05:00"]
    )


def test_new_york_fall_back_hourly_fires_each_wall_hour_once() -> None:
    spec = cron("0 * * * *", NEW_YORK)
    start = at(NEW_YORK, 2026, 11, 1, 0, 30)
    got = occurrences(spec, start, start, 3)
    expect_walls(
        got,
        NEW_YORK,
        [
            "2026-11-01T01:00:00.000-04:00",
            "2026-11-01T02:00:00.000-05:00",  # 01:00 EST is the repeated 01:00
            "2026-11-01T03:00:00.000-05:00",
        ],
    )


def test_berlin_both_changes() -> None:
    spec = cron("30 2 * * *", BERLIN)
    spring = at(BERLIN, 2026, 3, 28, 12, 0)
    expect_walls(
        occurrences(spec, spring, spring, 2),
        BERLIN,
        ["2026-03-29T03:00:00.000+02:00", "2026-03-30T02:30:00.000+02:00"],
    )
    autumn = at(BERLIN, 2026, 10, 24, 12, 0)
    expect_walls(
        occurrences(spec, autumn, autumn, 2),
        BERLIN,
        ["2026-10-25T02:30:00.000+02:00", "2026-10-26T02:30:00.000+01:00"],
    )


def test_sydney_spring_forward_in_october() -> None:
    spec = cron("30 2 * * *", SYDNEY)
    start = at(SYDNEY, 2026, 10, 3, 12, 0)
    expect_walls(
        occurrences(spec, start, start, 2),
        SYDNEY,
        ["2026-10-04T03:00:00.000+11:00", "2026-10-05T02:30:00.000+11:00"],
    )


def test_weekdays_at_nine_in_shanghai() -> None:
    spec = cron("0 9 * * MON-FRI", SHANGHAI)
    start = at(SHANGHAI, 2026, 1, 1, 0, 0)  # a Thursday
    expect_walls(
        occurrences(spec, start, start, 4),
        SHANGHAI,
        [
            "2026-01-01T09:00:00.000+08:00",
            "2026-01-02T09:00:00.000+08:00",
            "2026-01-05T09:00:00.000+08:00",  # Monday: the weekend is skipped
            "2026-01-06T09:00:00.000+08:00",
        ],
    )
    assert occurrences(spec, start, start, 1) == [at(UTC, 2026, 1, 1, 1, 0)]


def test_every_second_with_six_fields() -> None:
    spec = cron("* * * * * *")
    start = at(UTC, 2026, 1, 1, 12, 0, 0) + 500
    got = occurrences(spec, start - 500, start, 3)
    assert got == [start + 500, start + 1500, start + 2500], f"got {got}"


def test_six_fields_put_seconds_first() -> None:
    spec = cron("15 */5 * * * *")
    start = at(UTC, 2026, 1, 1, 12, 1)
    expect_walls(
        occurrences(spec, start, start, 2),
        UTC,
        ["2026-01-01T12:05:15.000+00:00", "2026-01-01T12:10:15.000+00:00"],
    )


# -- intervals, start, end, max_runs -------------------------------------------------------


def test_finite_interval_list_ends_after_the_list() -> None:
    spec = ScheduleSpec(intervals_ms=(500, 500, 1000))
    anchor = 1_000_000
    got = occurrences(spec, anchor, anchor, 4)
    assert got == [anchor + 500, anchor + 1000, anchor + 2000, None], f"got {got}"


def test_cycling_interval_list_repeats() -> None:
    spec = ScheduleSpec(intervals_ms=(500, 500, 1000), cycle=True)
    anchor = 1_000_000
    got = occurrences(spec, anchor, anchor, 7)
    expected = [500, 1000, 2000, 2500, 3000, 4000, 4500]
    assert got == [anchor + d for d in expected], f"got {got}"
    # From any point, straight to the next one without walking the laps.
    far = anchor + 4000 * 1_000_000 + 1200
    assert next_occurrence(spec, anchor, far) == anchor + 4000 * 1_000_000 + 2000


def test_start_end_and_max_runs_bound_a_cron() -> None:
    start_at = at(UTC, 2026, 1, 1, 10, 0)
    end_at = at(UTC, 2026, 1, 1, 12, 0)
    spec = cron("0 * * * *", start_at=start_at, end_at=end_at)
    before = at(UTC, 2026, 1, 1, 0, 0)
    got = occurrences(spec, start_at, before, 4)
    assert got == [start_at, start_at + 3_600_000, end_at, None], f"got {got}"  # end inclusive
    limited = cron("0 * * * *", max_runs=2)
    assert next_occurrence(limited, before, before, runs=1) is not None
    assert next_occurrence(limited, before, before, runs=2) is None


def test_last_occurrence_is_at_or_before() -> None:
    spec = cron("0 * * * *")
    anchor = at(UTC, 2026, 1, 1, 0, 0)
    assert last_occurrence(spec, anchor, at(UTC, 2026, 1, 1, 5, 0)) == at(UTC, 2026, 1, 1, 5, 0)
    assert last_occurrence(spec, anchor, at(UTC, 2026, 1, 1, 5, 59)) == at(UTC, 2026, 1, 1, 5, 0)
    cyc = ScheduleSpec(intervals_ms=(100, 300), cycle=True)
    assert last_occurrence(cyc, 0, 99) is None
    assert [last_occurrence(cyc, 0, t) for t in (100, 399, 400, 450, 800)] == [
        100,
        100,
        400,
        400,
        800,
    ]


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"cron": "61 * * * *"}, ("cron",)),
        ({"cron": "* * *"}, ("cron",)),
        ({"cron": "* * * * * * 2030"}, ("cron",)),
        ({"cron": "0 0 30 2 *"}, ("cron",)),  # never fires
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, ("timezone",)),
        ({"cron": "0 * * * *", "timezone": "../etc/passwd"}, ("timezone",)),
        ({}, ("cron",)),
        ({"cron": "0 * * * *", "intervals_ms": (5,)}, ("cron",)),
        ({"intervals_ms": ()}, ("intervals_ms",)),
        ({"intervals_ms": (5, 0)}, ("intervals_ms", 1)),
        ({"intervals_ms": (5,), "timezone": "UTC"}, ("timezone",)),
        ({"cron": "0 * * * *", "cycle": True}, ("cycle",)),
        ({"intervals_ms": (5,), "max_runs": 0}, ("max_runs",)),
        ({"intervals_ms": (5,), "start_at": 10, "end_at": 9}, ("end_at",)),
    ],
)
def test_invalid_specs_name_the_field(fields: dict[str, Any], loc: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidInput) as caught:
        ScheduleSpec(**fields)
    assert caught.value.loc == loc, f"expected loc {loc}, got {caught.value.loc}: {caught.value}"


def test_schedule_ids_leave_room_for_the_occurrence() -> None:
    check_schedule_id("a" * MAX_SCHEDULE_ID_LEN)
    with pytest.raises(InvalidInput):
        check_schedule_id("a" * (MAX_SCHEDULE_ID_LEN + 1))
    longest = "a" * MAX_SCHEDULE_ID_LEN + ":" + str(at(UTC, 2286, 1, 1, 0, 0))
    assert len(longest) <= 128
    assert parse_occurrence("daily:report:1767225600000") == ("daily:report", 1767225600000)
    assert parse_occurrence("order-42") is None
    assert parse_occurrence("order:abc") is None


# -- catch-up after a 3-hour outage ------------------------------------------------------------


HOUR = 3_600_000
T0 = at(UTC, 2026, 1, 1, 12, 0)


@pytest.mark.parametrize(
    ("catchup", "expected"),
    [
        (Catchup.SKIP, T0 + 3 * HOUR + 600_000),  # 15:10: only the future
        (Catchup.ONE, T0 + 3 * HOUR),  # 15:00: the latest missed, once
        (Catchup.ALL, T0 + 600_000),  # 12:10: every missed one, in order
    ],
)
def test_plan_after_outage(catchup: Catchup, expected: int) -> None:
    spec = cron("*/10 * * * *", catchup=catchup)
    now = T0 + 3 * HOUR + 5_000  # occurrence 12:00 dispatched at 15:00:05
    got = plan_after(spec, T0 - HOUR, T0, 1, now)
    assert got == expected, f"{catchup}: expected {wall(expected, UTC)}, got {wall(got or 0, UTC)}"


def test_a_slightly_late_occurrence_is_not_missed() -> None:
    spec = cron("* * * * * *")  # skip
    assert plan_after(spec, T0, T0, 1, T0 + 1500) == T0 + 1000


class Harness:
    """A Scheduler over a MemoryStore's jobs and schedules, on a FakeClock; the
    daemon's part is played by `dispatch_due`."""

    def __init__(self) -> None:
        self.clock = FakeClock(T0)
        self.jobs = MemoryStore()
        self.schedules = self.jobs.schedules
        self.metrics = Metrics()
        self.scheduler = Scheduler(self.schedules, self.jobs.jobs, self.metrics, self.clock)

    async def setup(self) -> None:
        await self.jobs.biz_types.put_biz_type(BizType("reports", "http://127.0.0.1:9/cb"))

    async def pending(self) -> list[str]:
        jobs, _ = await list_jobs(self.jobs, "reports", JobState.PENDING, 1000, None)
        return [j.job_id for j in jobs]

    async def dispatch_due(self) -> list[Claimed]:
        """Claim every pending job due by now, as the daemon would, and run the hook."""
        now = self.clock.now_ms()
        claimed: list[Claimed] = []
        for job_id in await self.pending():
            job = await self.jobs.jobs.get_job("reports", job_id)
            assert job is not None and job.next_attempt_at is not None
            if job.next_attempt_at <= now:
                second = job.next_attempt_at // 1000
                claimed += await self.jobs.scan.claim_due(second, now, f"c{now}", 1, now)
        await self.scheduler.on_dispatched(claimed)
        return claimed

    def runs_counted(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "timer_schedule_runs_total", {"biz_type": "reports"}
        )
        return value or 0.0


@pytest.fixture
async def harness() -> Harness:
    h = Harness()
    await h.setup()
    return h


@pytest.mark.parametrize(
    ("catchup", "next_after_outage"),
    [
        (Catchup.SKIP, T0 + 3 * HOUR + 600_000),
        (Catchup.ONE, T0 + 3 * HOUR),
        (Catchup.ALL, T0 + 1_200_000),
    ],
)
async def test_scheduler_catchup_after_outage(
    harness: Harness, catchup: Catchup, next_after_outage: int
) -> None:
    spec = cron("*/10 * * * *", catchup=catchup)
    await harness.scheduler.put("reports", "daily", spec)
    first = T0 + 600_000
    assert await harness.pending() == [f"daily:{first}"]
    harness.clock.set(T0 + 3 * HOUR + 5_000)  # the daemon was down for three hours
    await harness.dispatch_due()
    got = await harness.pending()
    assert got == [f"daily:{next_after_outage}"], f"{catchup}: got {got}"
    schedule = await harness.scheduler.get("reports", "daily")
    assert schedule is not None and schedule.runs == 1 and schedule.last_run_at == first
    assert schedule.last_job_id == f"daily:{first}"
    assert harness.runs_counted() == 1


async def test_catchup_all_fires_every_missed_occurrence_one_after_another(
    harness: Harness,
) -> None:
    spec = cron("*/10 * * * *", catchup=Catchup.ALL)
    await harness.scheduler.put("reports", "daily", spec)
    harness.clock.set(T0 + 3 * HOUR + 5_000)
    fired: list[str] = []
    for _ in range(40):
        fired += [c.job_id for c in await harness.dispatch_due()]
        harness.clock.advance(10)
    expected = [f"daily:{T0 + k * 600_000}" for k in range(1, 19)]  # 12:10 .. 15:00
    assert fired == expected, f"expected {len(expected)} in order, got {fired}"
    assert await harness.pending() == [f"daily:{T0 + 19 * 600_000}"]
    assert harness.runs_counted() == 18


async def test_resume_after_pause_applies_catchup(harness: Harness) -> None:
    spec = cron("*/10 * * * *", catchup=Catchup.ONE)
    await harness.scheduler.put("reports", "daily", spec)
    harness.clock.set(T0 + 600_000)
    await harness.dispatch_due()  # 12:10 goes out; 12:20 is created
    paused = cron("*/10 * * * *", catchup=Catchup.ONE, paused=True)
    await harness.scheduler.put("reports", "daily", paused)
    assert await harness.pending() == [], "pausing cancels the pending occurrence"
    harness.clock.set(T0 + 3 * HOUR + 5_000)
    result = await harness.scheduler.put("reports", "daily", spec)
    assert result.schedule.next_run_at == T0 + 3 * HOUR, "one job for the latest missed"
    assert await harness.pending() == [f"daily:{T0 + 3 * HOUR}"]
