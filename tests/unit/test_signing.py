"""Our Standard Webhooks signatures against the reference library (`standardwebhooks`).

The library checks timestamps against the real clock, so the callbacks here are sent "now".
"""

from __future__ import annotations

import base64
import json
import random
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from broker.callback import build_request
from timer_service.model import BizType, Job, JobState
from timer_service.receiver import verify_callback
from timer_service.signing import InvalidSecret, generate_secret, sign, signing_key

RAW_SECRET = "s3cret"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_job(payload_json: str = '{"order":42,"name":"Zoë"}') -> Job:
    at = now_ms() - 5
    return Job("orders", "order-42", at, payload_json, JobState.DISPATCHED, 0, at, at, at)


def sent(biz: BizType, fired_at: int | None = None) -> tuple[bytes, dict[str, str]]:
    request = build_request(biz, make_job(), 1, now_ms() if fired_at is None else fired_at)
    return request.body, request.headers


def test_the_library_verifies_a_callback_signed_with_a_whsec_secret() -> None:
    secret = generate_secret()
    body, headers = sent(BizType("orders", "http://x/cb", signing_secret=secret))

    got = Webhook(secret).verify(body, headers)

    assert got == json.loads(body), f"expected the body back, got {got}"
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(body, headers)


def test_the_library_verifies_a_plain_secret_given_as_its_utf8_bytes() -> None:
    body, headers = sent(BizType("orders", "http://x/cb", signing_secret=RAW_SECRET))

    for library in (Webhook(RAW_SECRET.encode()), Webhook("whsec_czNjcmV0")):
        assert library.verify(body, headers) == json.loads(body)


def test_the_library_verifies_either_secret_during_a_rotation_and_only_the_new_after() -> None:
    old, new = generate_secret(), generate_secret()
    start = now_ms()
    biz = BizType("orders", "http://x/cb", signing_secret=old).rotate_secret(new, 60_000, start)

    body, headers = sent(biz, start)
    assert len(headers["webhook-signature"].split(" ")) == 2, headers
    for secret in (new, old):
        assert Webhook(secret).verify(body, headers) == json.loads(body)

    # A callback sent when the window closes (the library reads the real clock: the window,
    # not the send time, is moved).
    closed = replace(biz, previous_secret_expires_at=start)
    body, headers = sent(closed, start)
    assert Webhook(new).verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, headers)


def test_a_library_signature_verifies_with_our_receiver() -> None:
    secret = generate_secret()
    fired_at = now_ms()
    doc = {"biz_type": "orders", "job_id": "order-42", "payload": {"é": 1},
           "due_at": fired_at - 5, "fired_at": fired_at, "attempt": 1}  # fmt: skip
    body = json.dumps(doc).encode()
    moment = datetime.fromtimestamp(fired_at // 1000, UTC)
    headers = {
        "webhook-id": "orders:order-42",
        "webhook-timestamp": str(fired_at // 1000),
        "webhook-signature": Webhook(secret).sign("orders:order-42", moment, body.decode()),
    }

    got = verify_callback(body, headers, secret)

    assert (got.idempotency_key, got.payload) == ("orders:order-42", {"é": 1}), got


def test_signatures_equal_the_library_for_random_keys_ids_and_bodies() -> None:
    rng = random.Random(7)
    for case in range(200):
        key = rng.randbytes(rng.randint(16, 64))
        encoded = base64.b64encode(key).decode()
        secret = "whsec_" + (encoded.rstrip("=") if case % 2 else encoded)
        msg_id = "".join(rng.choices("abcz09_.:-", k=rng.randint(1, 40)))
        timestamp_s = rng.randint(0, 4_000_000_000)
        text = "".join(rng.choices('{}[]":,ab é€😀\\n', k=rng.randint(0, 300)))
        moment = datetime.fromtimestamp(timestamp_s, UTC)

        ours = sign(secret, msg_id, timestamp_s, text.encode())
        theirs = Webhook(secret).sign(msg_id, moment, text)

        assert ours == theirs, f"case {case}: secret {secret!r}: {ours} != {theirs}"
        assert signing_key(secret) == key


def test_a_generated_secret_is_whsec_and_32_random_bytes() -> None:
    first, second = generate_secret(), generate_secret()
    assert first.startswith("whsec_") and first != second, (first, second)
    assert len(signing_key(first)) == 32
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("whsec_", "at least 16 bytes"),
        ("whsec_" + base64.b64encode(b"x" * 15).decode(), "at least 16 bytes, this one has 15"),
        ("whsec_not base64 at all!", "standard base64"),
        ("whsec_" + "A" * 21, "standard base64"),  # 21 % 4 == 1: no base64 length
        ("whsec_" + "é" * 24, "standard base64"),
        ("whsec_" + "-_" * 12, "standard base64"),  # the URL-safe alphabet is not the standard
        ("", "must not be empty"),
        ("\ud800", "valid Unicode"),
    ],
)
def test_unusable_secrets_are_refused(secret: str, message: str) -> None:
    with pytest.raises(InvalidSecret, match=message):
        signing_key(secret)


def test_plain_secrets_are_their_utf8_bytes() -> None:
    assert signing_key("s3cret") == b"s3cret"
    assert signing_key("pässword") == "pässword".encode()
    assert signing_key("whsec") == b"whsec"
