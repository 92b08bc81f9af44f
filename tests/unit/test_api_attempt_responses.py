"""The API shows each attempt's answer on GET of the job (docs/api.md, "Attempt
responses"); listings leave it out to stay small; the OpenAPI documents the shape."""

from __future__ import annotations

from tests.unit.api_harness import NOW, Api, expect
from timer_service.client import Job
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt
from timer_service.responses import AttemptResponse

ANSWER = AttemptResponse(
    (("Content-Type", "application/json"), ("Retry-After", "30")),
    '{"error":"maintenance"}',
)


async def failed_once(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="a", due_at=NOW), 201)
    second = NOW // 1000
    claimed = await api.store.scan.claim_due(second, NOW, "c1", 1, NOW)
    assert [c.job_id for c in claimed] == ["a"], claimed
    attempt = Attempt(1, NOW, 503, "HTTP 503", 12, ANSWER)
    ref = SendRef("orders", "a", second, "c1")
    await api.store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.RETRY, attempt, NOW + 30_000)], NOW
    )


async def test_get_shows_what_the_endpoint_answered(api: Api) -> None:
    await failed_once(api)
    job = expect(await api.request("GET", "/v1/jobs/orders/a"), 200)
    assert job["history"] == [
        {
            "attempt": 1,
            "at": NOW,
            "status_code": 503,
            "error": "HTTP 503",
            "duration_ms": 12,
            "response": {
                "headers": {"Content-Type": "application/json", "Retry-After": "30"},
                "body": '{"error":"maintenance"}',
                "truncated": False,
                "binary": False,
            },
        }
    ], job["history"]
    # The SDK's typed shape reads it, and dumps it as the server said it.
    typed = Job.model_validate(job)
    answer = typed.history[0].response
    assert answer is not None and answer.headers["Retry-After"] == "30"
    assert answer.body == '{"error":"maintenance"}' and not answer.binary
    assert list(typed.model_dump()["history"]) == job["history"]


async def test_a_listing_leaves_the_answers_out(api: Api) -> None:
    await failed_once(api)
    page = expect(await api.request("GET", "/v1/jobs", params={"biz_type": "orders"}), 200)
    [job] = page["items"]
    assert [sorted(a) for a in job["history"]] == [
        ["at", "attempt", "duration_ms", "error", "status_code"]
    ], job["history"]
    typed = Job.model_validate(job)
    assert typed.history[0].response is None
    assert "response" not in typed.model_dump()["history"][0], "a dump says what was sent"


async def test_the_openapi_documents_the_answer(api: Api) -> None:
    spec = expect(await api.request("GET", "/openapi.json"), 200)
    schemas = spec["components"]["schemas"]
    answer = schemas["AttemptResponseOut"]
    assert set(answer["properties"]) == {"headers", "body", "truncated", "binary"}
    assert "1024 bytes" in answer["properties"]["body"]["description"]
    assert "response" in schemas["AttemptOut"]["properties"]
