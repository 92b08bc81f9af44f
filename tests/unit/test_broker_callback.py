"""The callback protocol, pure: body, headers, signatures, Retry-After, backoff, verdicts."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json

import pytest

from broker.callback import Response, build_request, judge, parse_retry_after, retry_wait_ms
from timer_service.dispatch import OutcomeKind
from timer_service.model import BizType, Job, JobState, RetryPolicy

NOW = 1_767_225_600_000
POLICY = RetryPolicy(max_attempts=5, initial_backoff_ms=1000, max_backoff_ms=60_000, multiplier=2.0)


def make_job(payload_json: str = '{"order":42,"name":"Zoë"}', attempts: int = 0) -> Job:
    return Job(
        "orders",
        "order-42",
        NOW - 5,
        payload_json,
        JobState.DISPATCHED,
        attempts,
        NOW - 5,
        NOW - 10_000,
        NOW - 10_000,
    )


def make_biz(secret: str | None = "s3cret") -> BizType:
    return BizType("orders", "http://127.0.0.1:1/cb", signing_secret=secret)


def test_body_is_the_contract_json_with_the_payload_as_registered() -> None:
    request = build_request(make_biz(), make_job(), attempt=2, fired_at=NOW + 3)
    body = json.loads(request.body)
    expected = {
        "biz_type": "orders",
        "job_id": "order-42",
        "payload": {"order": 42, "name": "Zoë"},
        "due_at": NOW - 5,
        "fired_at": NOW + 3,
        "attempt": 2,
        "labels": {},
    }
    assert body == expected, f"expected {expected}, got {body}"
    assert b'"payload":{"order":42,"name":"Zo\xc3\xab"}' in request.body


def test_body_carries_the_labels() -> None:
    job = make_job().evolve(labels=(("region", "eu-1"), ("tenant", "Zoë")))
    request = build_request(make_biz(), job, attempt=1, fired_at=NOW + 3)
    labels = json.loads(request.body)["labels"]
    expected = {"region": "eu-1", "tenant": "Zoë"}
    assert labels == expected, f"expected {expected}, got {labels}"


def test_headers_and_standard_webhooks_signature() -> None:
    fired_at = NOW + 1003
    request = build_request(make_biz("s3cret"), make_job(), attempt=1, fired_at=fired_at)
    h = request.headers
    mac = hmac.new(b"s3cret", f"orders:order-42.{fired_at // 1000}.".encode() + request.body,
                   hashlib.sha256)  # fmt: skip
    expected = {
        "Content-Type": "application/json",
        "User-Agent": "timer-service/0.1.0",
        "Idempotency-Key": "orders:order-42",
        "X-Timer-Attempt": "1",
        "X-Timer-Timestamp": str(fired_at),
        "webhook-id": "orders:order-42",
        "webhook-timestamp": str(fired_at // 1000),
        "webhook-signature": "v1," + base64.b64encode(mac.digest()).decode(),
    }
    assert h == expected, f"expected {expected}, got {h}"


def test_no_signature_without_secret() -> None:
    request = build_request(make_biz(None), make_job(), attempt=1, fired_at=NOW)
    assert "webhook-signature" not in request.headers, f"got {request.headers}"
    assert request.headers["webhook-id"] == "orders:order-42", f"got {request.headers}"


def test_during_a_rotation_both_secrets_sign_the_new_one_first() -> None:
    biz = make_biz("old").rotate_secret("new", keep_previous_ms=60_000, now_ms=NOW)

    during = build_request(biz, make_job(), attempt=1, fired_at=NOW + 59_999)
    after = build_request(biz, make_job(), attempt=1, fired_at=NOW + 60_000)

    def entry(secret: bytes, request_body: bytes, timestamp_s: int) -> str:
        content = f"orders:order-42.{timestamp_s}.".encode() + request_body
        return "v1," + base64.b64encode(hmac.digest(secret, content, "sha256")).decode()

    ts = (NOW + 59_999) // 1000
    expected = f"{entry(b'new', during.body, ts)} {entry(b'old', during.body, ts)}"
    assert during.headers["webhook-signature"] == expected, during.headers
    expected = entry(b"new", after.body, (NOW + 60_000) // 1000)
    assert after.headers["webhook-signature"] == expected, after.headers


def test_an_unusable_stored_secret_signs_nothing_instead_of_failing() -> None:
    request = build_request(make_biz("whsec_short"), make_job(), attempt=1, fired_at=NOW)
    assert "webhook-signature" not in request.headers, f"got {request.headers}"


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("0", 0),
        ("7", 7000),
        (" 12 ", 12_000),
        (email.utils.formatdate((NOW + 30_000) / 1000, usegmt=True), 30_000),
        (email.utils.formatdate((NOW - 30_000) / 1000, usegmt=True), 0),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("", None),
        (None, None),
        # Hostile values (each once killed the send task, leaving its job stuck):
        ("\u00b2", None),  # a digit to str.isdigit, not to HTTP
        ("9" * 4301, 10**15),  # too many digits to parse: "very long", capped later
        ("Wed, 21 Oct 20150000000000000000000 07:28:00 GMT", None),  # a 23-digit year
    ],
)
def test_retry_after(value: str | None, expected_ms: int | None) -> None:
    got = parse_retry_after(value, NOW)
    assert got == expected_ms, f"Retry-After {value!r}: expected {expected_ms}, got {got}"


@pytest.mark.parametrize(
    ("attempt", "expected_ms"),
    [(1, 1000), (2, 2000), (3, 4000), (6, 32_000), (7, 60_000), (30, 60_000)],
)
def test_backoff(attempt: int, expected_ms: int) -> None:
    got = retry_wait_ms(POLICY, attempt, None, NOW)
    assert got == expected_ms, f"attempt {attempt}: expected {expected_ms}, got {got}"


def test_retry_after_is_capped_and_garbage_falls_back_to_backoff() -> None:
    assert retry_wait_ms(POLICY, 1, "3600", NOW) == 60_000
    assert retry_wait_ms(POLICY, 2, "3", NOW) == 3000
    assert retry_wait_ms(POLICY, 2, "later", NOW) == 2000


@pytest.mark.parametrize(
    ("response", "kind", "error"),
    [
        (Response(200), OutcomeKind.DELIVERED, None),
        (Response(204), OutcomeKind.DELIVERED, None),
        (Response(299), OutcomeKind.DELIVERED, None),
        (Response(408), OutcomeKind.RETRY, "HTTP 408"),
        (Response(425), OutcomeKind.RETRY, "HTTP 425"),
        (Response(429), OutcomeKind.RETRY, "HTTP 429"),
        (Response(500), OutcomeKind.RETRY, "HTTP 500"),
        (Response(503), OutcomeKind.RETRY, "HTTP 503"),
        (Response(599), OutcomeKind.RETRY, "HTTP 599"),
        (Response(None, error="timeout"), OutcomeKind.RETRY, "timeout"),
        (
            Response(None, error="connection error: refused"),
            OutcomeKind.RETRY,
            "connection error: refused",
        ),
        (Response(301), OutcomeKind.DEAD, "HTTP 301"),
        (Response(400), OutcomeKind.DEAD, "HTTP 400"),
        (Response(404), OutcomeKind.DEAD, "HTTP 404"),
        (Response(410), OutcomeKind.DEAD, "HTTP 410"),
        (Response(100), OutcomeKind.DEAD, "HTTP 100"),
    ],
)
def test_classification(response: Response, kind: OutcomeKind, error: str | None) -> None:
    verdict = judge(response, POLICY, attempt=1, budget_base=0, known_at=NOW)
    assert (verdict.kind, verdict.error) == (kind, error), (
        f"{response}: expected {(kind, error)}, got {(verdict.kind, verdict.error)}"
    )
    if kind is OutcomeKind.RETRY:
        assert verdict.next_attempt_at == NOW + 1000
    else:
        assert verdict.next_attempt_at is None


def test_retry_counts_from_when_the_outcome_was_known_and_honours_retry_after() -> None:
    verdict = judge(Response(429, retry_after="5"), POLICY, 3, 0, known_at=NOW + 777)
    assert verdict.next_attempt_at == NOW + 777 + 5000, f"got {verdict.next_attempt_at}"


def test_attempts_exhausted_is_dead_and_replay_budget_counts_from_base() -> None:
    last = judge(Response(503), POLICY, attempt=5, budget_base=0, known_at=NOW)
    assert last.kind is OutcomeKind.DEAD, f"expected dead after 5 of 5, got {last}"
    before = judge(Response(503), POLICY, attempt=4, budget_base=0, known_at=NOW)
    assert before.kind is OutcomeKind.RETRY, f"expected retry after 4 of 5, got {before}"
    replayed = judge(Response(503), POLICY, attempt=7, budget_base=5, known_at=NOW)
    assert replayed.kind is OutcomeKind.RETRY, f"expected retry (2 of 5), got {replayed}"
    delivered_on_last = judge(Response(200), POLICY, attempt=5, budget_base=0, known_at=NOW)
    assert delivered_on_last.kind is OutcomeKind.DELIVERED
