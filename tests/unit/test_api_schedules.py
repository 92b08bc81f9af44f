"""/v1/schedules over the in-memory stores, and the occurrence jobs it makes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.contract.stores import list_jobs
from tests.unit.api_harness import expect, locs, new_app
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed
from timer_service.metrics import Metrics
from timer_service.model import JobState
from timer_service.schedules import MAX_SCHEDULE_ID_LEN
from timer_service.scheduling import Scheduler
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import recording

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CALLBACK = {"callback_url": "http://127.0.0.1:9000/cb"}
URL = "/v1/schedules/reports/daily"


class Api:
    def __init__(self, client: httpx.AsyncClient, store: MemoryStore, clock: FakeClock) -> None:
        self.client = client
        self.store = store
        self.clock = clock
        self.metrics = Metrics()
        self.scheduler = Scheduler(store.schedules, store.jobs, self.metrics, clock)

    async def put(self, body: Any, url: str = URL) -> httpx.Response:
        return await self.client.put(url, json=body)

    async def jobs(self, state: JobState | None = None) -> dict[str, Any]:
        jobs, _ = await list_jobs(self.store, "reports", state, 1000, None)
        return {j.job_id: j for j in jobs}

    async def dispatch(self, job_id: str) -> list[Claimed]:
        """Claim one job as the daemon does (returns what it claimed)."""
        job = await self.store.jobs.get_job("reports", job_id)
        assert job is not None and job.next_attempt_at is not None, f"no job {job_id}"
        now = self.clock.now_ms()
        second = job.next_attempt_at // 1000
        return await self.store.scan.claim_due(second, max(now, job.next_attempt_at), "c", 1, now)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    store = recording(MemoryStore())
    clock = FakeClock(NOW)
    holder: list[Api] = []
    async with httpx.AsyncClient(base_url="http://api") as client:
        made = Api(client, store, clock)
        app = new_app(
            store, made.metrics, clock, {"max_payload_bytes": 100}, scheduler=made.scheduler
        )
        client._transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        holder.append(made)
        expect(await client.put("/v1/biz-types/reports", json=CALLBACK), 201)
        yield made


EVERY_MINUTE = {"cron": "0 * * * * *", "payload": {"report": "daily"}}


async def test_put_creates_then_replaces(api: Api) -> None:
    created = expect(await api.put(EVERY_MINUTE), 201)
    assert created == {
        "biz_type": "reports",
        "schedule_id": "daily",
        "cron": "0 * * * * *",
        "timezone": "UTC",
        "intervals_ms": None,
        "cycle": None,
        "payload": {"report": "daily"},
        "start_at": None,
        "end_at": None,
        "max_runs": None,
        "paused": False,
        "catchup": "skip",
        "next_run_at": NOW + 60_000,
        "runs": 0,
        "last_run_at": None,
        "last_job_id": None,
        "created_at": NOW,
        "updated_at": NOW,
    }, f"got {created}"
    api.clock.advance(5)
    replaced = expect(await api.put({**EVERY_MINUTE, "timezone": "Asia/Shanghai"}), 200)
    assert replaced["timezone"] == "Asia/Shanghai" and replaced["created_at"] == NOW
    assert replaced["updated_at"] == NOW + 5
    assert expect(await api.client.get(URL), 200) == replaced


async def test_intervals_with_start_at_as_rfc3339(api: Api) -> None:
    body = {"intervals_ms": [500, 500, 1000], "start_at": "2026-01-01T00:00:10Z", "max_runs": 2}
    got = expect(await api.put(body), 201)
    assert (got["intervals_ms"], got["cycle"], got["start_at"]) == (
        [500, 500, 1000],
        False,
        NOW + 10_000,
    )
    assert got["next_run_at"] == NOW + 10_500 and got["max_runs"] == 2


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"cron": "61 * * * *"}, ["body", "cron"]),
        ({"cron": "every day"}, ["body", "cron"]),
        ({"cron": "0 * * * *", "timezone": "Not/AZone"}, ["body", "timezone"]),
        ({"cron": "0 * * * *", "intervals_ms": [1000]}, ["body", "cron"]),
        ({"payload": 1}, ["body", "cron"]),
        ({"intervals_ms": [1000, 0]}, ["body", "intervals_ms", 1]),
        ({"intervals_ms": []}, ["body", "intervals_ms"]),
        ({"intervals_ms": [1000], "max_runs": 0}, ["body", "max_runs"]),
        ({"intervals_ms": [1000], "catchup": "some"}, ["body", "catchup"]),
        ({"intervals_ms": [1000], "start_at": "yesterday"}, ["body", "start_at"]),
        ({"intervals_ms": [1000], "start_at": 10, "end_at": 5}, ["body", "end_at"]),
        ({"intervals_ms": [1000], "paused": "no"}, ["body", "paused"]),
    ],
)
async def test_bad_specs_are_422_naming_the_field(
    api: Api, body: dict[str, Any], loc: list[Any]
) -> None:
    problem = expect(await api.put(body), 422)
    assert loc in locs(problem), f"expected an error at {loc}, got {problem}"
    assert await api.jobs() == {}, "a rejected PUT created a job"


async def test_bad_requests(api: Api) -> None:
    json_type = {"content-type": "application/json"}
    expect(await api.client.put(URL, content=b"{nope", headers=json_type), 400)
    expect(await api.put({"intervals_ms": [1000], "payload": "x" * 200}), 413)
    problem = expect(await api.put(EVERY_MINUTE, "/v1/schedules/unknown/daily"), 422)
    assert ["path", "biz_type"] in locs(problem), problem
    too_long = "a" * (MAX_SCHEDULE_ID_LEN + 1)
    problem = expect(await api.put(EVERY_MINUTE, f"/v1/schedules/reports/{too_long}"), 422)
    assert ["path", "schedule_id"] in locs(problem), problem
    expect(await api.put(EVERY_MINUTE, f"/v1/schedules/reports/{'a' * MAX_SCHEDULE_ID_LEN}"), 201)
    problem = expect(await api.put(EVERY_MINUTE, "/v1/schedules/reports/bad%20id"), 422)
    assert ["path", "schedule_id"] in locs(problem), problem


async def test_get_delete_list(api: Api) -> None:
    expect(await api.client.get(URL), 404)
    expect(await api.client.delete(URL), 404)
    expect(await api.put(EVERY_MINUTE), 201)
    expect(await api.put(EVERY_MINUTE, "/v1/schedules/reports/another"), 201)
    expect(await api.client.put("/v1/biz-types/other", json=CALLBACK), 201)
    expect(await api.put(EVERY_MINUTE, "/v1/schedules/other/daily"), 201)
    listed = expect(await api.client.get("/v1/schedules", params={"biz_type": "reports"}), 200)
    assert [s["schedule_id"] for s in listed["items"]] == ["another", "daily"], listed
    everything = expect(await api.client.get("/v1/schedules"), 200)
    assert len(everything["items"]) == 3
    expect(await api.client.get("/v1/schedules", params={"biz_type": "Bad!"}), 422)
    expect(await api.client.delete(URL), 204)
    expect(await api.client.get(URL), 404)


async def test_put_creates_exactly_the_next_occurrence_and_dispatch_the_following(
    api: Api,
) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    first = f"daily:{NOW + 60_000}"
    jobs = await api.jobs()
    assert list(jobs) == [first], f"expected only {first}, got {list(jobs)}"
    assert jobs[first].payload == {"report": "daily"} and jobs[first].due_at == NOW + 60_000
    expect(await api.put(EVERY_MINUTE), 200)  # a retried PUT changes nothing
    assert list(await api.jobs()) == [first]

    api.clock.set(NOW + 60_000)
    claimed = await api.dispatch(first)
    # Two daemons (or a republish) report the same dispatch: one advance, one next job.
    await api.scheduler.on_dispatched(claimed)
    await api.scheduler.on_dispatched(claimed)
    second = f"daily:{NOW + 120_000}"
    pending = await api.jobs(JobState.PENDING)
    assert list(pending) == [second], f"expected only {second} pending, got {list(pending)}"
    got = expect(await api.client.get(URL), 200)
    assert (got["runs"], got["last_run_at"], got["last_job_id"], got["next_run_at"]) == (
        1,
        NOW + 60_000,
        first,
        NOW + 120_000,
    ), got
    runs = api.metrics.registry.get_sample_value(
        "timer_schedule_runs_total", {"biz_type": "reports"}
    )
    assert runs == 1, f"expected one run counted, got {runs}"


async def test_on_dispatched_without_occurrences_touches_no_store(api: Api) -> None:
    before = dict(api.store.ops)
    plain = Claimed("reports", "order-42", 1, NOW, NOW, 1, "c")
    await api.scheduler.on_dispatched([plain])
    assert dict(api.store.ops) == before
    colon = Claimed("reports", "order:42", 1, NOW, NOW, 1, "c")
    await api.scheduler.on_dispatched([colon])  # looks like one, is not: a miss, no job
    assert await api.jobs() == {}


async def test_pause_resume_and_delete_cancel_the_pending_occurrence(api: Api) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    first = f"daily:{NOW + 60_000}"
    paused = expect(await api.put({**EVERY_MINUTE, "paused": True}), 200)
    assert paused["paused"] is True and paused["next_run_at"] is None
    assert (await api.jobs())[first].state is JobState.CANCELLED
    api.clock.advance(1000)
    resumed = expect(await api.put(EVERY_MINUTE), 200)
    # 00:01:00 is held by the cancelled job of the pause: the next one after it.
    assert resumed["next_run_at"] == NOW + 120_000, resumed
    assert list(await api.jobs(JobState.PENDING)) == [f"daily:{NOW + 120_000}"]
    expect(await api.client.delete(URL), 204)
    assert await api.jobs(JobState.PENDING) == {}, "delete left a pending occurrence"


async def test_replace_moves_the_next_occurrence(api: Api) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    moved = expect(await api.put({"cron": "30 * * * * *", "payload": 2}), 200)
    assert moved["next_run_at"] == NOW + 30_000
    pending = await api.jobs(JobState.PENDING)
    assert (
        list(pending) == [f"daily:{NOW + 30_000}"] and pending[f"daily:{NOW + 30_000}"].payload == 2
    )
    # Same time, new payload: the pending job takes the new payload.
    expect(await api.put({"cron": "30 * * * * *", "payload": 3}), 200)
    assert (await api.jobs(JobState.PENDING))[f"daily:{NOW + 30_000}"].payload == 3


async def test_delete_between_advance_and_create_leaves_no_job(api: Api) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    first = f"daily:{NOW + 60_000}"
    api.clock.set(NOW + 60_000)
    claimed = await api.dispatch(first)
    schedules = api.scheduler.schedules
    real_advance = schedules.advance

    async def advance_then_delete(*args: Any) -> bool:
        applied = await real_advance(*args)
        await api.scheduler.delete("reports", "daily")
        return applied

    schedules.advance = advance_then_delete  # type: ignore[method-assign]
    await api.scheduler.on_dispatched(claimed)
    assert await api.jobs(JobState.PENDING) == {}, "a deleted schedule got a new occurrence"


async def test_repair_creates_a_missing_job_and_advances_a_missed_dispatch(api: Api) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    first = f"daily:{NOW + 60_000}"
    api.clock.set(NOW + 60_000)
    await api.dispatch(first)  # the hook never ran: the schedule still waits for `first`
    api.clock.set(NOW + 60_000 + 65_000)  # 02:00 is missed by more than the grace
    assert await api.scheduler.repair() == 1
    got = expect(await api.client.get(URL), 200)
    assert got["runs"] == 1 and got["next_run_at"] == NOW + 180_000, got
    assert list(await api.jobs(JobState.PENDING)) == [f"daily:{NOW + 180_000}"]
    # A crash between advance and create: the next job is missing.
    await api.store.jobs.cancel_job("reports", f"daily:{NOW + 180_000}", api.clock.now_ms())
    api.store.state.jobs.pop(f"reports/daily:{NOW + 180_000}")
    api.clock.set(NOW + 180_000 + 61_000)
    assert await api.scheduler.repair() == 1
    assert list(await api.jobs(JobState.PENDING)) == [f"daily:{NOW + 180_000}"]


async def test_finite_intervals_end(api: Api) -> None:
    expect(await api.put({"intervals_ms": [500, 500, 1000]}), 201)
    fired = []
    for _ in range(5):
        pending = list(await api.jobs(JobState.PENDING))
        if not pending:
            break
        [job_id] = pending
        due = int(job_id.split(":")[1])
        api.clock.set(due)
        await api.scheduler.on_dispatched(await api.dispatch(job_id))
        fired.append(due - NOW)
    assert fired == [500, 1000, 2000], f"got {fired}"
    got = expect(await api.client.get(URL), 200)
    assert got["runs"] == 3 and got["next_run_at"] is None, got


async def test_schedule_hook_advances_in_the_background_and_swallows_errors(api: Api) -> None:
    from daemon.schedule_hook import ScheduleHook

    hook = ScheduleHook(api.scheduler)
    expect(await api.put(EVERY_MINUTE), 201)
    api.clock.set(NOW + 60_000)
    await hook(await api.dispatch(f"daily:{NOW + 60_000}"))
    await hook.drain()
    assert list(await api.jobs(JobState.PENDING)) == [f"daily:{NOW + 120_000}"]

    async def broken(*_: Any) -> dict[str, Any]:
        raise ConnectionError("store down")

    api.scheduler.schedules.get_many = broken  # type: ignore[method-assign]
    await hook([Claimed("reports", f"daily:{NOW + 120_000}", 1, NOW, NOW, 1, "c")])
    await hook.drain()  # logged and counted, not raised
    errors = api.metrics.registry.get_sample_value(
        "timer_store_errors_total", {"operation": "schedule_advance"}
    )
    assert errors == 1, f"expected one counted error, got {errors}"


async def test_cancelling_an_occurrence_moves_the_schedule_on_at_once(api: Api) -> None:
    expect(await api.put(EVERY_MINUTE), 201)
    first, second = f"daily:{NOW + 60_000}", f"daily:{NOW + 120_000}"
    assert list(await api.jobs(JobState.PENDING)) == [first]
    expect(await api.client.delete(f"/v1/jobs/reports/{first}"), 200)
    got = expect(await api.client.get(URL), 200)
    assert got["next_run_at"] == NOW + 120_000, f"the schedule stalled: {got}"
    assert list(await api.jobs(JobState.PENDING)) == [second]
