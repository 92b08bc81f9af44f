"""The console's API over the in-memory store: search filters, bulk cancel and replay,
the audit log, stats; and bad input on each, which changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api_harness import NOW, Api, expect
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt, second_of


async def seed(api: Api, n: int = 12) -> None:
    """n jobs of "orders" due one second apart, tenant t0/t1/t2 by i % 3; the even ones
    dead (an HTTP 400 at their due time + 7 ms); 2 jobs of "billing"."""
    expect(await api.put_biz("billing"), 201)
    jobs = [
        {
            "biz_type": "orders",
            "job_id": f"j{i:02d}",
            "due_at": NOW + 1000 * (i + 1),
            "labels": {"tenant": f"t{i % 3}"},
        }
        for i in range(n)
    ] + [{"biz_type": "billing", "job_id": f"b{i}", "delay_ms": 0} for i in range(2)]
    results = expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": jobs}), 200)
    assert {r["status"] for r in results["results"]} == {201}
    for i in range(0, n, 2):
        due = NOW + 1000 * (i + 1)
        claimed = await api.store.scan.claim_due(second_of(due), due, f"c{i}", 1, due)
        outcomes = [
            Outcome(
                SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket),
                OutcomeKind.DEAD,
                Attempt(1, due + 7, 400, "HTTP 400", 3),
            )
            for c in claimed
            if c.biz_type == "orders"
        ]
        await api.store.outcomes.record_outcomes(outcomes, due + 10)


async def ids(api: Api, query: str) -> list[str]:
    got: list[str] = []
    cursor = ""
    while True:
        page = expect(await api.request("GET", f"/v1/jobs?{query}&limit=2{cursor}"), 200)
        got += [f"{j['biz_type']}/{j['job_id']}" for j in page["items"]]
        if page["next_cursor"] is None:
            return got
        cursor = f"&cursor={page['next_cursor']}"


# -- search -----------------------------------------------------------------------------


async def test_search_filters_combine(api: Api) -> None:
    await seed(api)
    cases = {
        "biz_type=orders&state=dead": [f"orders/j{i:02d}" for i in range(0, 12, 2)],
        "biz_type=orders&label=tenant:t1": [f"orders/j{i:02d}" for i in (1, 4, 7, 10)],
        "label=tenant:t1&state=dead": [f"orders/j{i:02d}" for i in (4, 10)],
        "biz_type=orders&job_id_prefix=j1": ["orders/j10", "orders/j11"],
        f"biz_type=orders&due_after={NOW + 3000}&due_before={NOW + 5000}": [
            "orders/j02",
            "orders/j03",
        ],
        "biz_type=orders&label=tenant:t1&label=tenant:t1": [
            f"orders/j{i:02d}" for i in (1, 4, 7, 10)
        ],
        "biz_type=billing": ["billing/b0", "billing/b1"],
        "biz_type=orders&label=tenant:nobody": [],
    }
    for query, expected in cases.items():
        got = await ids(api, query)
        assert got == expected, f"{query}: expected {expected}, got {got}"


BAD_SEARCHES = [
    ("label=tenant", ["query", "label"]),
    ("label=Tenant:x", ["query", "label"]),
    ("label=" + "k:" + "v" * 129, ["query", "label"]),
    ("label=a:1&label=a:2", ["query", "label"]),
    ("job_id_prefix=a%20b", ["query", "job_id_prefix"]),
    ("due_after=-1", ["query", "due_after"]),
    ("due_after=x", ["query", "due_after"]),
    (f"due_after={NOW}&due_before={NOW}", ["query", "due_after"]),
    ("state=sleeping", ["query", "state"]),
    ("biz_type=Orders", ["query", "biz_type"]),
]


@pytest.mark.parametrize(("query", "loc"), BAD_SEARCHES)
async def test_bad_search_filters_are_refused(api: Api, query: str, loc: list[str]) -> None:
    problem = expect(await api.request("GET", f"/v1/jobs?{query}"), 422)
    locs = [e["loc"] for e in problem["errors"]]
    assert loc in locs, f"{query}: expected an error at {loc}, got {locs}"


# -- bulk ---------------------------------------------------------------------------------


async def bulk(api: Api, action: str, **body: Any) -> Any:
    return await api.request("POST", f"/v1/jobs:bulk-{action}", json=body)


async def test_bulk_replay_dry_run_then_pages_to_completion(api: Api) -> None:
    await seed(api)
    before = await api.snapshot()
    where = {"biz_type": "orders", "state": "dead"}
    dry = expect(await bulk(api, "replay", filter=where, dry_run=True), 200)
    assert (dry["dry_run"], dry["matched"], dry["changed"], dry["next_cursor"]) == (
        True,
        6,
        0,
        None,
    ), dry
    assert await api.snapshot() == before, "a dry run changes nothing"
    api.clock.advance(60_000)
    calls, cursor, changed, op_ids = 0, None, 0, set()
    while True:
        body: dict[str, Any] = {"filter": where, "limit": 4}
        if cursor is not None:
            body["cursor"] = cursor
        answer = expect(await bulk(api, "replay", **body), 200)
        calls += 1
        changed += answer["changed"]
        op_ids.add(answer["operation_id"])
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert (calls, changed, len(op_ids)) == (2, 6, 1), (calls, changed, op_ids)
    replayed = await ids(api, "biz_type=orders&state=pending")
    assert len(replayed) == 12, replayed
    job = expect(await api.request("GET", "/v1/jobs/orders/j00"), 200)
    assert job["next_attempt_at"] == NOW + 60_000 and job["attempts"] == 1, job
    assert [NOW // 1000 + 60] in api.written, "the daemon is nudged for the replayed second"
    audit = expect(await api.request("GET", "/v1/audit?action=jobs.bulk_replay"), 200)
    entries = audit["items"]
    assert [e["count"] for e in entries] == [2, 4], entries
    assert {e["detail"]["operation_id"] for e in entries} == op_ids
    assert entries[0]["filter"] == {"biz_type": "orders", "state": ["dead"]}, entries[0]
    assert entries[0]["actor"] == "anonymous" and entries[0]["biz_type"] == "orders"


async def test_bulk_cancel_by_label_skips_jobs_in_flight(api: Api) -> None:
    await seed(api)
    due = NOW + 2000  # j01 (tenant t1): claimed, and its callback started
    [c] = await api.store.scan.claim_due(second_of(due), due, "cx", 1, due)
    await api.store.outcomes.start_sending(
        [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)], "send", due
    )
    where = {"biz_type": "orders", "labels": {"tenant": "t1"}}
    dry = expect(await bulk(api, "cancel", filter=where, dry_run=True), 200)
    assert dry["matched"] == 1, f"only j07 is pending and idle, got {dry}"
    done = expect(await bulk(api, "cancel", filter=where), 200)
    assert (done["matched"], done["changed"], done["next_cursor"]) == (2, 1, None), done
    states = {
        j: expect(await api.request("GET", f"/v1/jobs/orders/{j}"), 200)["state"]
        for j in ("j01", "j04", "j07", "j10")
    }
    expected = {"j01": "dispatched", "j04": "dead", "j07": "cancelled", "j10": "dead"}
    assert states == expected, f"expected {expected}, got {states}"


async def test_a_retried_call_with_the_same_cursor_changes_nothing_twice(api: Api) -> None:
    await seed(api)
    where = {"biz_type": "orders", "state": "dead"}
    first = expect(await bulk(api, "replay", filter=where, limit=2), 200)
    second = expect(
        await bulk(api, "replay", filter=where, limit=2, cursor=first["next_cursor"]), 200
    )
    again = expect(
        await bulk(api, "replay", filter=where, limit=2, cursor=first["next_cursor"]), 200
    )
    assert second["changed"] == 2 and again["changed"] == 2, (second, again)
    dead = await ids(api, "biz_type=orders&state=dead")
    assert dead == [], f"6 jobs, 2 + 2 + 2 replayed: expected none dead, got {dead}"


def on(**where: Any) -> dict[str, Any]:
    return {"filter": {"biz_type": "orders", **where}}


F = ["body", "filter"]
BAD_BULK: list[tuple[str, dict[str, Any], int, list[Any] | None]] = [
    ("replay", {}, 422, F),
    ("replay", {"filter": {}}, 422, [*F, "biz_type"]),
    ("cancel", {"filter": {"state": "pending"}}, 422, [*F, "biz_type"]),
    ("replay", on(state="pending"), 422, [*F, "state"]),
    ("cancel", on(state="dead"), 422, [*F, "state"]),
    ("cancel", on(state="nope"), 422, [*F, "state"]),
    ("cancel", on(labels={"A": "x"}), 422, [*F, "labels", "A", "[key]"]),
    ("cancel", on(labels={f"k{i}": "v" for i in range(9)}), 422, [*F, "labels"]),
    ("cancel", on(due_after=5, due_before=5), 422, F),
    ("cancel", on(job_id_prefix="a b"), 422, [*F, "job_id_prefix"]),
    ("cancel", {**on(), "limit": 0}, 422, ["body", "limit"]),
    ("cancel", {**on(), "limit": 1001}, 422, ["body", "limit"]),
    ("cancel", {**on(), "dry_run": "yes"}, 422, ["body", "dry_run"]),
    ("cancel", {**on(), "cursor": "garbage"}, 422, ["body", "cursor"]),
    ("replay", {"filter": {"biz_type": "nobody"}}, 404, None),
]


@pytest.mark.parametrize(("action", "body", "status", "loc"), BAD_BULK)
async def test_bad_bulk_calls_are_refused_and_change_nothing(
    api: Api, action: str, body: dict[str, Any], status: int, loc: list[Any] | None
) -> None:
    await seed(api)
    before = await api.snapshot()
    problem = expect(await bulk(api, action, **body), status)
    if loc is not None:
        locs = [e["loc"] for e in problem["errors"]]
        assert loc in locs, f"expected an error at {loc}, got {locs}"
    assert await api.snapshot() == before, "a refused call changes nothing"
    audit = expect(await api.request("GET", "/v1/audit?action=jobs.bulk_" + action), 200)
    assert audit["items"] == [], audit


async def test_a_cursor_goes_on_only_with_its_filter_and_action(api: Api) -> None:
    await seed(api)
    where = {"biz_type": "orders", "state": "dead"}
    first = expect(await bulk(api, "replay", filter=where, limit=2), 200)
    cursor = first["next_cursor"]
    other = {"biz_type": "orders", "state": "dead", "labels": {"tenant": "t0"}}
    for action, given in (("replay", other), ("cancel", {"biz_type": "orders"})):
        before = await api.snapshot()
        problem = expect(await bulk(api, action, filter=given, cursor=cursor), 422)
        assert problem["errors"][0]["loc"] == ["body", "cursor"], problem
        assert await api.snapshot() == before


# -- audit -------------------------------------------------------------------------------


async def test_every_operator_action_is_audited(api: Api) -> None:
    expect(await api.put_biz(paused=True), 200)
    expect(await api.request("POST", "/v1/biz-types/orders/secret:rotate", json={}), 200)
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=60_000), 201)
    expect(await api.request("PATCH", "/v1/jobs/orders/a", json={"delay_ms": 1000}), 200)
    expect(await api.request("DELETE", "/v1/jobs/orders/a"), 200)
    schedule = {"intervals_ms": [60_000]}
    expect(await api.request("PUT", "/v1/schedules/orders/s1", json=schedule), 201)
    expect(await api.request("DELETE", "/v1/schedules/orders/s1"), 204)
    expect(await api.request("DELETE", "/v1/biz-types/orders"), 204)
    page = expect(await api.request("GET", "/v1/audit"), 200)
    got = [(e["action"], e["job_id"]) for e in page["items"]]
    expected = [
        ("biz_type.delete", None),
        ("schedule.delete", None),
        ("schedule.put", None),
        ("job.cancel", "a"),
        ("job.reschedule", "a"),
        ("biz_type.rotate_secret", None),
        ("biz_type.put", None),
        ("biz_type.put", None),
    ]
    assert got == expected, f"expected {expected}, got {got}"
    assert page["items"][-2]["detail"] == {"created": False, "paused": True, "was_paused": False}
    assert all(e["biz_type"] == "orders" and e["actor"] == "anonymous" for e in page["items"])
    assert "s3cret" not in str(page) and "whsec_" not in str(page), "no secret in the log"
    paged = expect(await api.request("GET", "/v1/audit?limit=3"), 200)
    assert [e["id"] for e in paged["items"]] == [e["id"] for e in page["items"][:3]]
    rest = expect(await api.request("GET", f"/v1/audit?cursor={paged['next_cursor']}"), 200)
    assert [e["id"] for e in rest["items"]] == [e["id"] for e in page["items"][3:]]


async def test_an_action_is_audited_with_the_name_of_the_token_that_made_it(
    make_api: Any,
) -> None:
    api = await make_api(api_tokens="alice=tok-alice,ci=tok-ci")
    alice = {"Authorization": "Bearer tok-alice"}
    body = {"callback_url": "http://127.0.0.1:9/cb"}
    expect(await api.request("PUT", "/v1/biz-types/orders", json=body, headers=alice), 201)
    got = await api.request("GET", "/v1/audit", headers={"Authorization": "Bearer tok-ci"})
    entry = expect(got, 200)["items"][0]
    assert (entry["actor"], entry["action"]) == ("alice", "biz_type.put"), entry


@pytest.mark.parametrize(
    ("query", "loc"),
    [("action=job.delete", ["query", "action"]), ("limit=0", ["query", "limit"]),
     ("biz_type=A", ["query", "biz_type"])],
)  # fmt: skip
async def test_bad_audit_queries_are_refused(api: Api, query: str, loc: list[str]) -> None:
    problem = expect(await api.request("GET", f"/v1/audit?{query}"), 422)
    assert loc in [e["loc"] for e in problem["errors"]], problem


# -- stats -------------------------------------------------------------------------------


async def test_stats_count_states_outcomes_and_lateness(api: Api) -> None:
    await seed(api)
    api.clock.advance(12_000)  # now NOW + 12 s: every dead attempt within the minute
    one = expect(await api.request("GET", "/v1/biz-types/orders/stats"), 200)
    expected = {
        "biz_type": "orders",
        "paused": False,
        "rate_limit_per_s": None,
        "counts": {"pending": 6, "dispatched": 0, "delivered": 0, "dead": 6, "cancelled": 0},
        "delivered_last_minute": 0,
        "failed_last_minute": 6,
        "lateness_p99_ms": 7,
    }
    assert one == expected, f"expected {expected}, got {one}"
    every = expect(await api.request("GET", "/v1/stats"), 200)
    assert every["at"] == NOW + 12_000
    assert [i["biz_type"] for i in every["items"]] == ["billing", "orders"]
    assert every["items"][1] == expected
    assert every["items"][0]["counts"]["pending"] == 2
    api.clock.advance(300_000)
    later = expect(await api.request("GET", "/v1/biz-types/orders/stats"), 200)
    assert (later["failed_last_minute"], later["lateness_p99_ms"]) == (0, None), later
    expect(await api.request("GET", "/v1/biz-types/nobody/stats"), 404)
    expect(await api.request("GET", "/v1/biz-types/No/stats"), 422)
