"""HTTP conventions: ETag and If-Match on biz types, Location on creating PUTs, cursors
this API gave, typed problem types that resolve, readable operation ids."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.api_harness import CALLBACK, Api, expect, locs
from timer_service.api.problems import PROBLEM_DESCRIPTIONS

BIZ = "/v1/biz-types/orders"


# -- ETag / If-Match -----------------------------------------------------------------------------


async def test_get_and_put_carry_an_etag_that_changes_with_each_write(api: Api) -> None:
    first = (await api.request("GET", BIZ)).headers.get("etag")
    assert first and first.startswith('"'), f"expected a strong ETag, got {first!r}"
    api.clock.advance(1)
    put = await api.put_biz(burst=3)
    expect(put, 200)
    second = put.headers.get("etag")
    assert second and second != first, f"expected a new ETag, got {first!r} then {second!r}"
    assert (await api.request("GET", BIZ)).headers.get("etag") == second


async def test_if_match_with_the_current_etag_replaces(api: Api) -> None:
    current = (await api.request("GET", BIZ)).headers["etag"]
    api.clock.advance(1)
    body = {**CALLBACK, "burst": 7}
    response = await api.request("PUT", BIZ, json=body, headers={"If-Match": current})
    assert expect(response, 200)["burst"] == 7
    wildcard = await api.request("PUT", BIZ, json=body, headers={"If-Match": "*"})
    expect(wildcard, 200)


async def test_if_match_with_a_stale_etag_is_412_and_changes_nothing(api: Api) -> None:
    stale = (await api.request("GET", BIZ)).headers["etag"]
    api.clock.advance(1)
    expect(await api.put_biz(burst=2), 200)  # another operator's edit
    before = await api.snapshot()
    body = {**CALLBACK, "burst": 9}
    problem = expect(await api.request("PUT", BIZ, json=body, headers={"If-Match": stale}), 412)
    assert problem["type"] == "/problems/precondition-failed", problem
    assert await api.snapshot() == before, "a 412 changed the store"


async def test_two_edits_of_the_same_version_at_once_one_wins_the_other_is_412(api: Api) -> None:
    """The check and the write are one: both PUTs read the version before either writes
    (held at a barrier), and still only one replaces it (before, both did: a lost update)."""
    current = (await api.request("GET", BIZ)).headers["etag"]
    api.clock.advance(1)
    read = api.store.biz_types.get_biz_type
    both_read = asyncio.Barrier(2)

    waiting = [1, 2]

    async def read_together(name: str) -> Any:
        found = await read(name)
        if waiting:  # the first read of each PUT (the route reads again after writing)
            waiting.pop()
            await both_read.wait()
        return found

    api.store.biz_types.get_biz_type = read_together
    answers = await asyncio.gather(
        *(
            api.request("PUT", BIZ, json={**CALLBACK, "burst": b}, headers={"If-Match": current})
            for b in (5, 6)
        )
    )
    api.store.biz_types.get_biz_type = read
    assert sorted(r.status_code for r in answers) == [200, 412], [r.text for r in answers]
    winner = next(r for r in answers if r.status_code == 200).json()["burst"]
    assert expect(await api.request("GET", BIZ), 200)["burst"] == winner


async def test_a_rotation_never_undoes_an_edit_made_meanwhile(api: Api) -> None:
    """A rotation writes over the version it read only: a PUT landing between its read
    and its write is kept, and the rotation answers 409 having changed nothing."""
    api.clock.advance(1)
    read = api.store.biz_types.get_biz_type
    rotation_read = asyncio.Event()
    edit_done = asyncio.Event()

    async def read_then_wait(name: str) -> Any:
        found = await read(name)
        api.store.biz_types.get_biz_type = read  # only the rotation's read waits
        rotation_read.set()
        await edit_done.wait()
        return found

    api.store.biz_types.get_biz_type = read_then_wait

    async def edit() -> None:
        await rotation_read.wait()
        expect(await api.put_biz(burst=4), 200)
        edit_done.set()

    rotated, _ = await asyncio.gather(api.request("POST", f"{BIZ}/secret:rotate"), edit())
    problem = expect(rotated, 409)
    assert "nothing was changed" in problem["detail"], problem
    assert expect(await api.request("GET", BIZ), 200)["burst"] == 4, "the edit was undone"


async def test_if_match_on_a_biz_type_that_does_not_exist_is_412(api: Api) -> None:
    response = await api.request(
        "PUT", "/v1/biz-types/fresh", json=CALLBACK, headers={"If-Match": "*"}
    )
    expect(response, 412)
    expect(await api.request("GET", "/v1/biz-types/fresh"), 404)


async def test_if_none_match_star_only_creates(api: Api) -> None:
    only_create = {"If-None-Match": "*"}
    expect(await api.request("PUT", BIZ, json=CALLBACK, headers=only_create), 412)
    fresh = await api.request("PUT", "/v1/biz-types/fresh", json=CALLBACK, headers=only_create)
    expect(fresh, 201)


# -- Location -------------------------------------------------------------------------------------


async def test_creating_puts_return_location_and_replacing_ones_do_not(api: Api) -> None:
    created = await api.request("PUT", "/v1/biz-types/coupons", json=CALLBACK)
    expect(created, 201)
    assert created.headers.get("location") == "/v1/biz-types/coupons", created.headers
    replaced = await api.request("PUT", "/v1/biz-types/coupons", json=CALLBACK)
    expect(replaced, 200)
    assert "location" not in replaced.headers, replaced.headers
    spec = {"cron": "@daily"}
    schedule = await api.request("PUT", "/v1/schedules/orders/daily", json=spec)
    expect(schedule, 201)
    assert schedule.headers.get("location") == "/v1/schedules/orders/daily", schedule.headers
    again = await api.request("PUT", "/v1/schedules/orders/daily", json=spec)
    expect(again, 200)
    assert "location" not in again.headers, again.headers


# -- cursors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("cursor=garbage", "no slash"),
        ("cursor=orders/", "no job id"),
        ("cursor=Orders/a", "not a biz type"),
        ("cursor=orders/a%20b", "not a job id"),
        ("biz_type=orders&cursor=coupons/a", "another biz type than the filter"),
    ],
)
async def test_a_cursor_this_api_did_not_give_is_422(api: Api, query: str, why: str) -> None:
    problem = expect(await api.request("GET", f"/v1/jobs?{query}"), 422)
    assert ["query", "cursor"] in locs(problem), f"{why}: got {locs(problem)}"


async def test_next_cursor_pages_through_every_job(api: Api) -> None:
    for i in range(5):
        expect(await api.create(biz_type="orders", job_id=f"j{i}", delay_ms=60_000), 201)
    seen: list[str] = []
    url = "/v1/jobs?biz_type=orders&limit=2"
    page = expect(await api.request("GET", url), 200)
    while True:
        seen += [job["job_id"] for job in page["items"]]
        if page["next_cursor"] is None:
            break
        page = expect(await api.request("GET", f"{url}&cursor={page['next_cursor']}"), 200)
    assert seen == [f"j{i}" for i in range(5)], f"got {seen}"


# -- problem types and operation ids ----------------------------------------------------------


async def test_problem_types_are_typed_and_resolve(api: Api) -> None:
    cases = [
        ("GET", "/v1/jobs/orders/none", None, 404, "/problems/not-found"),
        ("POST", "/v1/jobs", {"biz_type": "orders"}, 422, "/problems/validation"),
        ("PUT", "/v1/jobs", None, 405, "/problems/method-not-allowed"),
    ]
    for method, path, body, status, type_ in cases:
        problem = expect(await api.request(method, path, json=body), status)
        assert problem["type"] == type_, f"{method} {path}: expected {type_}, got {problem}"
    for type_, description in PROBLEM_DESCRIPTIONS.items():
        doc = expect(await api.request("GET", type_), 200)
        assert doc == {"type": type_, "description": description}, doc
    expect(await api.request("GET", "/problems/no-such-kind"), 404)


async def test_operation_ids_are_readable(api: Api) -> None:
    schema = (await api.request("GET", "/openapi.json")).json()
    ids = {
        f"{method.upper()} {path}": operation["operationId"]
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    expected = {
        "PUT /v1/biz-types/{biz_type}": "putBizType",
        "POST /v1/jobs": "createJob",
        "POST /v1/jobs:batch": "createJobs",
        "GET /v1/jobs": "listJobs",
        "PATCH /v1/jobs/{biz_type}/{job_id}": "rescheduleJob",
        "PUT /v1/schedules/{biz_type}/{schedule_id}": "putSchedule",
        "GET /healthz": "healthz",
    }
    got = {key: ids.get(key) for key in expected}
    assert got == expected, f"expected {expected}, got {got}"
    assert len(set(ids.values())) == len(ids), f"operation ids repeat: {sorted(ids.values())}"
