"""Job labels over the API: validated at create (single and batch), shown on the job,
compared on a repeated create."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api_harness import NOW, Api, expect


def body(job_id: str = "j1", **fields: Any) -> dict[str, Any]:
    return {"biz_type": "orders", "job_id": job_id, "due_at": NOW + 1000, **fields}


async def test_labels_are_stored_and_shown(api: Api) -> None:
    labels = {"tenant": "acme", "region": "eu-1", "x.y_z-9": "ünïcode " * 10}
    created = expect(await api.create(**body(labels=labels)), 201)
    assert created["labels"] == labels, f"expected {labels}, got {created['labels']}"
    got = expect(await api.request("GET", "/v1/jobs/orders/j1"), 200)
    assert got["labels"] == labels, f"expected {labels}, got {got['labels']}"
    plain = expect(await api.create(**body("j2")), 201)
    assert plain["labels"] == {}, plain
    empty = expect(await api.create(**body("j3", labels=None)), 201)
    assert empty["labels"] == {}, empty


async def test_a_repeated_create_compares_labels(api: Api) -> None:
    expect(await api.create(**body(labels={"a": "1", "b": "2"})), 201)
    same = expect(await api.create(**body(labels={"b": "2", "a": "1"})), 200)
    assert same["labels"] == {"a": "1", "b": "2"}
    problem = expect(await api.create(**body(labels={"a": "1"})), 409)
    assert "labels" in problem["detail"], problem
    expect(await api.create(**body()), 409)


BAD_LABELS = [
    ({"Tenant": "x"}, ["body", "labels", "Tenant", "[key]"]),
    ({"": "x"}, ["body", "labels", "", "[key]"]),
    ({"k" * 33: "x"}, ["body", "labels", "k" * 33, "[key]"]),
    ({"a:b": "x"}, ["body", "labels", "a:b", "[key]"]),
    ({"ok": "v" * 129}, ["body", "labels", "ok"]),
    ({"ok": 1}, ["body", "labels", "ok"]),
    ({"ok": {"nested": "no"}}, ["body", "labels", "ok"]),
    ({f"k{i}": "v" for i in range(9)}, ["body", "labels"]),
    (["a", "b"], ["body", "labels"]),
    ("a:b", ["body", "labels"]),
]


@pytest.mark.parametrize(("labels", "loc"), BAD_LABELS)
async def test_bad_labels_are_refused_naming_the_key(api: Api, labels: Any, loc: list[Any]) -> None:
    problem = expect(await api.create(**body(labels=labels)), 422)
    got = [e["loc"] for e in problem["errors"]]
    assert loc in got, f"expected an error at {loc}, got {got}"
    _, jobs = await api.snapshot()
    assert jobs == [], f"nothing may be created, got {jobs}"


async def test_bad_labels_in_a_batch_fail_only_their_item(api: Api) -> None:
    items = [body("good", labels={"a": "1"}), body("bad", labels={"A": "1"})]
    results = expect(await api.request("POST", "/v1/jobs:batch", json={"jobs": items}), 200)
    statuses = [r["status"] for r in results["results"]]
    assert statuses == [201, 422], f"expected [201, 422], got {statuses}"
    error = results["results"][1]["error"]
    locs = [e["loc"] for e in error["errors"]]
    assert ["body", "jobs", 1, "labels", "A", "[key]"] in locs, locs
    assert results["results"][0]["job"]["labels"] == {"a": "1"}
