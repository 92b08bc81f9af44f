"""A schedule's "run now" and "skip next" over the in-memory store: what each makes,
what it leaves as it was, the audit entries, and refusals that change nothing."""

from __future__ import annotations

from tests.unit.api_harness import NOW, Api, expect
from timer_service.model import second_of

URL = "/v1/schedules/orders/tick"
MINUTE = 60_000


async def put_tick(api: Api, **extra: object) -> dict[str, object]:
    body = {"intervals_ms": [MINUTE], "cycle": True, "payload": {"n": 1}, **extra}
    return expect(await api.request("PUT", URL, json=body), 201)  # type: ignore[no-any-return]


async def job_state(api: Api, job_id: str) -> str:
    job = expect(await api.request("GET", f"/v1/jobs/orders/{job_id}"), 200)
    return str(job["state"])


async def audit_actions(api: Api) -> list[tuple[str, object]]:
    page = expect(await api.request("GET", "/v1/audit?biz_type=orders"), 200)
    return [(e["action"], e["detail"]) for e in page["items"]]


async def test_run_now_makes_a_job_due_now_and_moves_nothing(api: Api) -> None:
    before = await put_tick(api)
    api.clock.advance(5_000)
    job = expect(await api.request("POST", f"{URL}/run-now"), 201)
    assert job["job_id"] == f"tick:{NOW + 5_000}" and job["due_at"] == NOW + 5_000, job
    assert job["payload"] == {"n": 1} and job["state"] == "pending", job
    assert api.written[-1] == [second_of(NOW + 5_000)], "the daemon is told at once"
    after = expect(await api.request("GET", URL), 200)
    assert (after["next_run_at"], after["runs"]) == (before["next_run_at"], 0), after
    assert await job_state(api, f"tick:{NOW + MINUTE}") == "pending", "the next one stays"
    again = expect(await api.request("POST", f"{URL}/run-now"), 200)
    assert again["job_id"] == job["job_id"], "the same millisecond: the same job"
    [(action, detail), *_] = await audit_actions(api)
    assert action == "schedule.run_now", action
    assert detail == {"schedule_id": "tick", "job_id": job["job_id"]}, detail


async def test_run_now_works_on_a_paused_schedule(api: Api) -> None:
    await put_tick(api, paused=True)
    job = expect(await api.request("POST", f"{URL}/run-now"), 201)
    assert job["due_at"] == NOW, job


async def test_skip_next_cancels_it_and_goes_on_with_the_one_after(api: Api) -> None:
    await put_tick(api)
    got = expect(await api.request("POST", f"{URL}/skip-next"), 200)
    assert got["next_run_at"] == NOW + 2 * MINUTE and got["runs"] == 0, got
    assert await job_state(api, f"tick:{NOW + MINUTE}") == "cancelled"
    assert await job_state(api, f"tick:{NOW + 2 * MINUTE}") == "pending"
    [(action, detail), *_] = await audit_actions(api)
    assert action == "schedule.skip_next", action
    assert detail == {
        "schedule_id": "tick",
        "skipped": NOW + MINUTE,
        "next_run_at": NOW + 2 * MINUTE,
    }, detail
    twice = expect(await api.request("POST", f"{URL}/skip-next"), 200)
    assert twice["next_run_at"] == NOW + 3 * MINUTE, twice


async def test_skip_next_refuses_what_it_cannot_skip(api: Api) -> None:
    await put_tick(api, paused=True)
    problem = expect(await api.request("POST", f"{URL}/skip-next"), 409)
    assert "no next occurrence" in problem["detail"], problem
    await put_tick_resumed(api)
    due = NOW + MINUTE
    await api.store.scan.claim_due(second_of(due), due, "c", 1, due)  # dispatched
    expect(await api.request("POST", f"{URL}/skip-next"), 409)
    assert await job_state(api, f"tick:{due}") == "dispatched", "changed nothing"
    entries = await audit_actions(api)
    assert all(a != "schedule.skip_next" for a, _ in entries), entries


async def put_tick_resumed(api: Api) -> None:
    body = {"intervals_ms": [MINUTE], "cycle": True, "payload": {"n": 1}}
    expect(await api.request("PUT", URL, json=body), 200)


async def test_unknown_schedules_and_bad_ids_are_problems(api: Api) -> None:
    for action in ("run-now", "skip-next"):
        problem = expect(await api.request("POST", f"/v1/schedules/orders/nope/{action}"), 404)
        assert problem["status"] == 404, problem
        expect(await api.request("POST", f"/v1/schedules/orders/bad%20id/{action}"), 422)


async def test_skip_next_of_an_occurrence_whose_job_was_never_made(api: Api) -> None:
    """A crash between a schedule's advance and its create leaves a next_run_at with no
    job (the repair would make it): skipping it moves on and makes the following one."""
    await put_tick(api)
    [stored] = await api.store.schedules.list("orders")
    orphan = NOW + 5 * MINUTE  # an occurrence of the rule whose job does not exist
    await api.store.schedules.put(stored.evolve(next_run_at=orphan))
    got = expect(await api.request("POST", f"{URL}/skip-next"), 200)
    assert got["next_run_at"] == orphan + MINUTE, got
    assert await job_state(api, f"tick:{orphan + MINUTE}") == "pending"
    expect(await api.request("GET", f"/v1/jobs/orders/tick:{orphan}"), 404)
