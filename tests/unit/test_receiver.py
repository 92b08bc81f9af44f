"""Verifying callbacks built exactly as docs/api.md, "Callback protocol", says (hmac by hand)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI

from timer_service.receiver import Callback, CallbackVerifier, InvalidSignature, verify_callback

NOW_MS = 1_767_225_600_004
SECRET = "s3cret"


def callback_body(**changes: Any) -> bytes:
    doc = {"biz_type": "orders", "job_id": "order-42", "payload": {"order": 42},
           "due_at": 1_767_225_600_000, "fired_at": NOW_MS, "attempt": 1}  # fmt: skip
    return json.dumps(doc | changes).encode()


def callback_headers(
    body: bytes, secret: str = SECRET, timestamp_ms: int = NOW_MS
) -> dict[str, str]:
    message = f"{timestamp_ms}.".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": "orders:order-42",
        "X-Timer-Attempt": "1",
        "X-Timer-Timestamp": str(timestamp_ms),
        "X-Timer-Signature": f"sha256={digest}",
    }


def test_a_well_signed_callback_is_read() -> None:
    body = callback_body()

    got = verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)

    expected = Callback(biz_type="orders", job_id="order-42", payload={"order": 42},
                        due_at=1_767_225_600_000, fired_at=NOW_MS, attempt=1,
                        idempotency_key="orders:order-42")  # fmt: skip
    assert got == expected, f"expected {expected}, got {got}"
    with pytest.raises(ValueError):  # frozen
        got.attempt = 2  # type: ignore[misc]


def test_header_names_match_case_insensitively() -> None:
    body = callback_body()
    headers = {name.upper(): value for name, value in callback_headers(body).items()}

    assert (
        verify_callback(body, headers, SECRET, now_ms=NOW_MS).idempotency_key == "orders:order-42"
    )


def test_any_of_rotated_secrets_verifies() -> None:
    body = callback_body()

    for signer in ("old", "new"):
        cb = verify_callback(body, callback_headers(body, signer), ["new", "old"], now_ms=NOW_MS)
        assert cb.job_id == "order-42", f"signed with {signer!r}: got {cb}"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("tampered body", "does not match"),
        ("wrong secret", "does not match"),
        ("tampered timestamp", "does not match"),
        ("missing signature", "missing x-timer-signature"),
        ("missing timestamp", "missing x-timer-timestamp"),
        ("stale", "beyond"),
        ("future", "beyond"),
        ("garbled timestamp", "not epoch ms"),
    ],
)
def test_bad_callbacks_raise_invalid_signature(case: str, message: str) -> None:
    body = callback_body()
    headers = callback_headers(body)
    now_ms = NOW_MS
    if case == "tampered body":
        body = callback_body(payload={"order": 43})
    elif case == "wrong secret":
        headers = callback_headers(body, "other")
    elif case == "tampered timestamp":
        headers["X-Timer-Timestamp"] = str(NOW_MS + 1)
    elif case == "missing signature":
        del headers["X-Timer-Signature"]
    elif case == "missing timestamp":
        del headers["X-Timer-Timestamp"]
    elif case == "stale":
        now_ms = NOW_MS + 300_001
    elif case == "future":
        now_ms = NOW_MS - 300_001
    elif case == "garbled timestamp":
        headers["X-Timer-Timestamp"] = "yesterday"

    with pytest.raises(InvalidSignature, match=message):
        verify_callback(body, headers, [SECRET], now_ms=now_ms)


def test_timestamps_at_the_tolerance_edge_pass() -> None:
    body = callback_body()
    headers = callback_headers(body)

    for now_ms in (NOW_MS + 10_000, NOW_MS - 10_000):
        assert verify_callback(body, headers, SECRET, tolerance_s=10, now_ms=now_ms)
    with pytest.raises(InvalidSignature):
        verify_callback(body, headers, SECRET, tolerance_s=10, now_ms=NOW_MS + 10_001)


def test_a_signed_body_that_is_not_a_callback_is_refused() -> None:
    body = b'{"biz_type": "orders"}'

    with pytest.raises(InvalidSignature, match="not a callback"):
        verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)


def test_no_secret_is_a_configuration_error() -> None:
    body = callback_body()
    with pytest.raises(ValueError, match="secret"):
        verify_callback(body, callback_headers(body), [], now_ms=NOW_MS)
    with pytest.raises(ValueError, match="secret"):
        CallbackVerifier([])


def test_invalid_signature_is_a_value_error() -> None:
    assert issubclass(InvalidSignature, ValueError)


# --- FastAPI dependency ------------------------------------------------------------------


def receiver_app(verifier: CallbackVerifier) -> FastAPI:
    app = FastAPI()

    @app.post("/timer-callback")
    async def on_timer(cb: Callback = Depends(verifier)) -> dict[str, Any]:
        return {"job_id": cb.job_id, "key": cb.idempotency_key}

    return app


async def post(app: FastAPI, body: bytes, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as http:
        return await http.post("/timer-callback", content=body, headers=headers)


async def test_the_dependency_hands_the_route_a_verified_callback() -> None:
    now_ms = time.time_ns() // 1_000_000
    body = callback_body(fired_at=now_ms)
    app = receiver_app(CallbackVerifier(["new", SECRET]))

    response = await post(app, body, callback_headers(body, timestamp_ms=now_ms))

    expected = {"job_id": "order-42", "key": "orders:order-42"}
    assert (response.status_code, response.json()) == (200, expected), response.text


@pytest.mark.parametrize("secret", ["wrong", None])
async def test_the_dependency_answers_401_to_a_bad_signature(secret: str | None) -> None:
    now_ms = time.time_ns() // 1_000_000
    body = callback_body(fired_at=now_ms)
    headers = callback_headers(body, secret or SECRET, timestamp_ms=now_ms)
    if secret is None:
        del headers["X-Timer-Signature"]

    response = await post(receiver_app(CallbackVerifier(SECRET)), body, headers)

    assert response.status_code == 401, f"expected 401, got {response.status_code}: {response.text}"
    assert "x-timer-signature" in response.json()["detail"]


async def test_the_dependency_refuses_a_stale_callback() -> None:
    stale_ms = time.time_ns() // 1_000_000 - 301_000
    body = callback_body(fired_at=stale_ms)

    response = await post(
        receiver_app(CallbackVerifier(SECRET)), body, callback_headers(body, timestamp_ms=stale_ms)
    )

    assert response.status_code == 401, f"expected 401, got {response.status_code}: {response.text}"
