"""The load calendar and flexible windows against the real processes (issue 32 items
1 and 2), both ways a user runs the service: `dev` alone, and `timer-service
api|daemon|broker` over RabbitMQ on SecantusDB. Only what a client sees: the API's
answers and the callbacks."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from tests.e2e.conftest import Stack
from tests.e2e.harness import Receiver, now_ms
from tests.support import unique_name

pytestmark = pytest.mark.e2e


async def put_biz(api: httpx.AsyncClient, receiver: Receiver) -> str:
    biz = unique_name("cal")
    r = await api.put(f"/v1/biz-types/{biz}", json={"callback_url": receiver.url})
    assert r.status_code == 201, r.text
    return biz


async def calendar(api: httpx.AsyncClient, start: int, biz: str, step_ms: int) -> list[int]:
    query = {"from": start, "to": start + 10 * step_ms, "step_ms": step_ms, "biz_type": biz}
    r = await api.get("/v1/calendar", params=query)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["step_ms"] == step_ms and body["buckets"][0]["at"] == start, body
    return [b["due"] for b in body["buckets"]]


async def test_the_calendar_counts_what_is_pending(
    stack: Stack, api: httpx.AsyncClient, receiver: Receiver
) -> None:
    biz = await put_biz(api, receiver)
    start = (now_ms() // 60_000 + 60) * 60_000  # a whole minute, an hour ahead
    jobs = [
        {"biz_type": biz, "job_id": f"j{i}", "due_at": start + minute * 60_000 + i * 10}
        for i, minute in enumerate([0, 0, 0, 2, 2, 9])
    ]
    r = await api.post("/v1/jobs:batch", json={"jobs": jobs})
    assert r.status_code == 200 and all(x["status"] == 201 for x in r.json()["results"]), r.text
    assert await calendar(api, start, biz, 60_000) == [3, 0, 2, 0, 0, 0, 0, 0, 0, 1]
    assert (await api.delete(f"/v1/jobs/{biz}/j0")).status_code == 200
    moved = await api.patch(f"/v1/jobs/{biz}/j5", json={"due_at": start + 4 * 60_000})
    assert moved.status_code == 200, moved.text
    assert await calendar(api, start, biz, 60_000) == [2, 0, 2, 0, 1, 0, 0, 0, 0, 0]
    bad = await api.get("/v1/calendar", params={"from": start, "to": start + 10, "step_ms": 1500})
    assert bad.status_code == 422, bad.text
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert "step_ms" in bad.json()["detail"], bad.json()


async def test_a_windowed_herd_spreads_and_is_never_early(
    stack: Stack, api: httpx.AsyncClient, receiver: Receiver
) -> None:
    biz = await put_biz(api, receiver)
    due = (now_ms() // 1000 + 4) * 1000
    jobs = [
        {"biz_type": biz, "job_id": f"h{i}", "due_at": due, "window_ms": 5000} for i in range(30)
    ]
    r = await api.post("/v1/jobs:batch", json={"jobs": jobs})
    assert r.status_code == 200, r.text
    made = [x["job"] for x in r.json()["results"]]
    fire_at = {j["job_id"]: j["fire_at"] for j in made}
    spread = Counter(fire_at.values())
    assert sorted(spread) == [due + k * 1000 for k in range(6)], spread
    assert set(spread.values()) == {5}, spread
    assert all(j["window_ms"] == 5000 and j["due_at"] == due for j in made)
    again = await api.post("/v1/jobs", json=jobs[0])  # the same request: the same moment
    assert again.status_code == 200 and again.json()["fire_at"] == fire_at["h0"], again.text
    await receiver.wait_for(set(fire_at), timeout_s=30)
    for arrival in receiver.arrivals:
        assert arrival.due_at == due, arrival  # the callback keeps the registered due_at
        assert arrival.fired_at >= fire_at[arrival.job_id], (
            f"{arrival.job_id} fired at {arrival.fired_at}, before its fire_at"
            f" {fire_at[arrival.job_id]}"
        )
