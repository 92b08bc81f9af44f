"""Schemathesis against the service's own OpenAPI document, served by `timer-service api`.

Every generated request, valid (positive) or not (negative), must get an answer
the schema documents (status code and body) and never a 5xx. A biz type is
registered up front and about half the generated cases are steered onto it, so
job operations reach the store instead of stopping at "unknown biz type".

The operations are driven from one test with Hypothesis directly
(`APIOperation.as_strategy`): schemathesis's lazy `from_fixture` loader does not
run under pytest 9, and the schema only exists once the API process is up.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.badinput.conftest import Api

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
# Derandomized (the same cases every run), no example database, and no
# shrinking: a failure is reported with its reproducing request instead.
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Targets:
    """What steered cases aim at: the registered biz type and jobs that exist in it
    (fresh ones for each operation, since a fuzzed DELETE cancels them)."""

    biz_type: str
    job_ids: list[str] = field(default_factory=list)


def aimed_at(container: Any, biz_type: str, job_id: str | None) -> Any:
    """A copy of a generated body or path-parameter dict naming `biz_type` (and `job_id`
    when given) wherever it names a biz type or job (batch items included)."""
    steered = copy.deepcopy(container)
    items = [steered]
    if isinstance(steered.get("jobs"), list):
        items += steered["jobs"]
    for item in items:
        if isinstance(item, dict):
            if "biz_type" in item:
                item["biz_type"] = biz_type
            if "job_id" in item and job_id is not None:
                item["job_id"] = job_id
    return steered


@pytest.fixture(scope="module")
def targets(api: Api) -> Targets:
    return Targets(api.biz_type)


@pytest.fixture(scope="module")
def api_schema(api: Api, targets: Targets) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json", wait_for_schema=30)

    def as_generated_or_aimed(_: Any, container: Any) -> st.SearchStrategy[Any]:
        if not isinstance(container, dict):
            return st.just(container)
        aimed = st.sampled_from([None, *targets.job_ids]).map(
            lambda job_id: aimed_at(container, targets.biz_type, job_id)
        )
        return st.just(container) | aimed

    schema.hook("flatmap_path_parameters")(as_generated_or_aimed)
    schema.hook("flatmap_body")(as_generated_or_aimed)
    return schema


def fuzz(operation: Any, mode: GenerationMode, base_url: str) -> tuple[Counter[int], list[str]]:
    """Runs up to MAX_EXAMPLES cases; returns the statuses that passed the checks and
    each failure's report."""
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        try:
            response = case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=10)
            statuses[response.status_code] += 1
        except AssertionError as exc:  # schemathesis's failures are AssertionErrors
            failures.append(str(exc))

    try:
        run()
    except Unsatisfiable:
        # Nothing to break in an operation without parameters or body.
        if mode is GenerationMode.POSITIVE:
            raise
    return statuses, failures


def prepare(api: Api, targets: Targets, round_no: int) -> None:
    """The biz type registered (a fuzzed DELETE may have removed it) and fresh jobs."""
    r = httpx.put(
        f"{api.url}/v1/biz-types/{targets.biz_type}",
        json={"callback_url": "http://127.0.0.1:9/callback"},
        timeout=10,
    )
    assert r.status_code in (200, 201), f"registering {targets.biz_type}: {r.status_code} {r.text}"
    targets.job_ids = [f"r{round_no}-{k}" for k in range(3)]
    jobs = [
        {"biz_type": targets.biz_type, "job_id": job_id, "delay_ms": 3_600_000, "payload": k}
        for k, job_id in enumerate(targets.job_ids)
    ]
    r = httpx.post(f"{api.url}/v1/jobs:batch", json={"jobs": jobs}, timeout=10)
    statuses = [item["status"] for item in r.json()["results"]] if r.status_code == 200 else []
    assert statuses == [201] * len(jobs), f"creating {jobs}: {r.status_code} {r.text}"


def test_every_operation_answers_as_documented(api: Api, targets: Targets, api_schema: Any) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10, f"expected the full API in /openapi.json, got {operations}"
    failures: dict[str, list[str]] = {}
    summary = []
    for round_no, (operation, mode) in enumerate(itertools.product(operations, MODES)):
        prepare(api, targets, round_no)
        statuses, found = fuzz(operation, mode, api.url)
        label = f"{operation.label} [{mode.value}]"
        passed = ", ".join(f"{code}x{n}" for code, n in sorted(statuses.items()))
        summary.append(f"{label}: passed {passed or 'none'}; {len(found)} failures")
        if found:
            failures[label] = found
        api.assert_running()
    print("\n" + "\n".join(summary))
    report = "\n\n".join(
        f"=== {label}: {len(found)} failing cases; first:\n{found[0]}"
        for label, found in failures.items()
    )
    assert not failures, f"expected every answer documented and no 5xx; got:\n{report}"
