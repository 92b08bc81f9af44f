"""Verifying callbacks signed as docs/api.md, "Callback protocol", says (Standard Webhooks, hmac by
hand; tests/unit/test_signing.py checks the scheme against the reference library)."""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI

from timer_service import receiver_fastapi
from timer_service.receiver import (
    Callback,
    CallbackVerifier,
    InvalidSignature,
    signing_keys,
    verify_callback,
    verify_with_keys,
)

NOW_MS = 1_767_225_600_004
SECRET = "s3cret"
WHSEC = "whsec_" + base64.b64encode(bytes(range(24))).decode()
MSG_ID = "orders:order-42"


def callback_body(**changes: Any) -> bytes:
    doc = {"biz_type": "orders", "job_id": "order-42", "payload": {"order": 42},
           "due_at": 1_767_225_600_000, "fired_at": NOW_MS, "attempt": 1}  # fmt: skip
    return json.dumps(doc | changes).encode()


def v1(key: bytes, body: bytes, msg_id: str = MSG_ID, timestamp_s: int = NOW_MS // 1000) -> str:
    mac = hmac.new(key, f"{msg_id}.{timestamp_s}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def callback_headers(
    body: bytes, key: bytes = SECRET.encode(), timestamp_ms: int = NOW_MS, msg_id: str = MSG_ID
) -> dict[str, str]:
    timestamp_s = timestamp_ms // 1000
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": msg_id,
        "X-Timer-Attempt": "1",
        "X-Timer-Timestamp": str(timestamp_ms),
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": v1(key, body, msg_id, timestamp_s),
    }


def test_a_well_signed_callback_is_read() -> None:
    body = callback_body()

    got = verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)

    expected = Callback(biz_type="orders", job_id="order-42", payload={"order": 42},
                        due_at=1_767_225_600_000, fired_at=NOW_MS, attempt=1,
                        labels={}, idempotency_key=MSG_ID)  # fmt: skip
    assert got == expected, f"expected {expected}, got {got}"
    with pytest.raises(ValueError):  # frozen
        got.attempt = 2  # type: ignore[misc]


def test_labels_come_from_the_body() -> None:
    for labels, expected in (({"team": "a"}, {"team": "a"}), (None, {})):
        body = callback_body(labels=labels)
        got = verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)
        assert got.labels == expected, f"labels {labels}: expected {expected}, got {got.labels}"


def test_a_whsec_secret_is_its_base64_decoded_key() -> None:
    body = callback_body()

    got = verify_callback(body, callback_headers(body, bytes(range(24))), WHSEC, now_ms=NOW_MS)

    assert got.job_id == "order-42", got


def test_header_names_match_case_insensitively() -> None:
    body = callback_body()
    headers = {name.upper(): value for name, value in callback_headers(body).items()}

    assert verify_callback(body, headers, SECRET, now_ms=NOW_MS).idempotency_key == MSG_ID


def test_any_of_rotated_secrets_verifies() -> None:
    body = callback_body()

    for signer in ("old", "new"):
        headers = callback_headers(body, signer.encode())
        cb = verify_callback(body, headers, ["new", "old"], now_ms=NOW_MS)
        assert cb.job_id == "order-42", f"signed with {signer!r}: got {cb}"


def test_any_signature_of_several_verifies_and_unknown_versions_are_skipped() -> None:
    body = callback_body()
    headers = callback_headers(body)
    headers["webhook-signature"] = (
        f"v1a,c29tZXRoaW5nIGVsc2U= {v1(b'new', body)}  {headers['webhook-signature']}"
    )

    assert verify_callback(body, headers, SECRET, now_ms=NOW_MS).job_id == "order-42"


def test_the_idempotency_key_is_the_signed_webhook_id_never_the_header() -> None:
    body = callback_body()
    headers = callback_headers(body) | {"Idempotency-Key": "orders:someone-else"}

    got = verify_callback(body, headers, SECRET, now_ms=NOW_MS)

    assert got.idempotency_key == MSG_ID, f"expected the signed {MSG_ID}, got {got}"


def test_a_webhook_id_that_is_not_the_bodys_job_is_refused() -> None:
    body = callback_body()
    headers = callback_headers(body, msg_id="orders:order-43")

    with pytest.raises(InvalidSignature, match="not the body's"):
        verify_callback(body, headers, SECRET, now_ms=NOW_MS)


def non_ascii(headers: dict[str, str]) -> None:
    headers["webhook-signature"] = headers["webhook-signature"][:-2] + "é="


BAD_CASES: dict[str, tuple[Any, str]] = {
    "tampered body": (lambda h: None, "does not match"),
    "wrong secret": (lambda h: h.update(callback_headers(callback_body(), b"other")), "match"),
    "changed webhook-id": (lambda h: h.update({"webhook-id": "orders:order-43"}), "match"),
    "tampered timestamp": (lambda h: h.update({"webhook-timestamp": str(NOW_MS // 1000 + 1)}),
                           "does not match"),
    "missing signature": (lambda h: h.pop("webhook-signature"), "missing webhook-signature"),
    "missing timestamp": (lambda h: h.pop("webhook-timestamp"), "missing webhook-timestamp"),
    "missing id": (lambda h: h.pop("webhook-id"), "missing webhook-id"),
    "empty signature": (lambda h: h.update({"webhook-signature": " "}), "missing"),
    "stale": (lambda h: h.update(callback_headers(callback_body(), timestamp_ms=NOW_MS - 301_000)),
              "beyond"),
    "future": (lambda h: h.update(callback_headers(callback_body(), timestamp_ms=NOW_MS + 301_000)),
               "beyond"),
    "word timestamp": (lambda h: h.update({"webhook-timestamp": "yesterday"}), "epoch seconds"),
    "ms timestamp": (lambda h: h.update({"webhook-timestamp": str(NOW_MS)}), "beyond"),
    "fraction timestamp": (lambda h: h.update({"webhook-timestamp": "1767225600.5"}), "epoch sec"),
    "signed timestamp": (lambda h: h.update({"webhook-timestamp": "+1767225600"}), "epoch sec"),
    "padded timestamp": (lambda h: h.update({"webhook-timestamp": "01767225600"}), "epoch sec"),
    "huge timestamp": (lambda h: h.update({"webhook-timestamp": "9" * 5000}), "epoch seconds"),
    "arabic digits": (lambda h: h.update({"webhook-timestamp": "١٧٦٧٢٢٥٦٠٠"}), "not ASCII"),
    "non-ASCII signature": (non_ascii, "not ASCII"),
    "non-ASCII id": (lambda h: h.update({"webhook-id": "orders:ordér-42"}), "not ASCII"),
    "no comma": (lambda h: h.update({"webhook-signature": "v1"}), "<version>,<signature>"),
    "no version": (lambda h: h.update({"webhook-signature": ",abcd"}), "<version>,<signature>"),
    "bad base64": (lambda h: h.update({"webhook-signature": "v1,not*base64"}), "not base64"),
    "short base64": (lambda h: h.update({"webhook-signature": "v1,abc"}), "not base64"),
    "only other versions": (lambda h: h.update({"webhook-signature": "v1a,abcd"}), "no v1"),
    "not a str": (lambda h: h.update({"webhook-signature": b"v1,abcd"}), "not ASCII text"),
    "two ids": (lambda h: h.update({"WEBHOOK-ID": "orders:order-43"}), "given twice"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_callbacks_raise_invalid_signature(case: str) -> None:
    change, message = BAD_CASES[case]
    headers = callback_headers(callback_body())
    change(headers)
    body = callback_body(payload={"order": 43}) if case == "tampered body" else callback_body()

    with pytest.raises(InvalidSignature, match=message):
        verify_callback(body, headers, [SECRET], now_ms=NOW_MS)


def test_garbage_headers_only_ever_raise_invalid_signature() -> None:
    rng = random.Random(11)
    body = callback_body()
    alphabet = "v1,=+/ \t0123456789abcXYZ.:-é€\x00\x7f\udcff😀"
    for case in range(2000):
        headers = callback_headers(body)
        signed = ("webhook-id", "webhook-timestamp", "webhook-signature")
        for name in rng.sample(signed, rng.randint(1, 3)):
            headers[name] = "".join(rng.choices(alphabet, k=rng.randint(0, 60)))
        try:
            verify_callback(body, headers, [SECRET, WHSEC], now_ms=NOW_MS)
        except InvalidSignature:
            continue
        raise AssertionError(f"case {case}: accepted {headers}")


def test_timestamps_at_the_tolerance_edge_pass() -> None:
    body = callback_body()
    headers = callback_headers(body, timestamp_ms=NOW_MS - 4)  # on a whole second

    for now_ms in (NOW_MS - 4 + 10_000, NOW_MS - 4 - 10_000):
        assert verify_callback(body, headers, SECRET, tolerance_s=10, now_ms=now_ms)
    with pytest.raises(InvalidSignature):
        verify_callback(body, headers, SECRET, tolerance_s=10, now_ms=NOW_MS - 4 + 10_001)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"biz_type": "orders"}', "not a callback"),
        (b'["orders", "order-42"]', "not a JSON object"),
        (b"orders:order-42", "not JSON"),
        (b'{"biz_type": "orders\xff"}', "not JSON"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_a_signed_body_that_is_not_a_callback_is_refused(body: bytes, message: str) -> None:
    with pytest.raises(InvalidSignature, match=message):
        verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)


def test_no_secret_or_an_unusable_one_is_a_configuration_error() -> None:
    body = callback_body()
    for secrets in ([], "", ["whsec_tooshort"], [b"s3cret"]):
        with pytest.raises(ValueError, match="secret") as caught:
            verify_callback(body, callback_headers(body), secrets, now_ms=NOW_MS)  # type: ignore[arg-type]
        assert not isinstance(caught.value, InvalidSignature), f"{secrets!r}: {caught.value!r}"
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
    headers = callback_headers(body, timestamp_ms=now_ms) | {"Idempotency-Key": "forged"}

    response = await post(app, body, headers)

    expected = {"job_id": "order-42", "key": MSG_ID}
    assert (response.status_code, response.json()) == (200, expected), response.text


@pytest.mark.parametrize("secret", ["wrong", None])
async def test_the_dependency_answers_401_to_a_bad_signature(secret: str | None) -> None:
    now_ms = time.time_ns() // 1_000_000
    body = callback_body(fired_at=now_ms)
    headers = callback_headers(body, (secret or SECRET).encode(), timestamp_ms=now_ms)
    if secret is None:
        del headers["webhook-signature"]

    response = await post(receiver_app(CallbackVerifier(SECRET)), body, headers)

    assert response.status_code == 401, f"expected 401, got {response.status_code}: {response.text}"
    assert "webhook-signature" in response.json()["detail"]


async def test_the_dependency_refuses_a_stale_callback() -> None:
    stale_ms = time.time_ns() // 1_000_000 - 301_000
    body = callback_body(fired_at=stale_ms)

    response = await post(
        receiver_app(CallbackVerifier(SECRET)), body, callback_headers(body, timestamp_ms=stale_ms)
    )

    assert response.status_code == 401, f"expected 401, got {response.status_code}: {response.text}"


# -- the verifier's building blocks are public: a receiver in another framework uses them


def test_keys_made_once_verify_as_the_secrets_do() -> None:
    body = callback_body()
    keys = signing_keys(["whsec_" + base64.b64encode(b"other" * 5).decode(), SECRET])

    got = verify_with_keys(body, callback_headers(body), keys, now_ms=NOW_MS)

    assert got == verify_callback(body, callback_headers(body), SECRET, now_ms=NOW_MS)
    with pytest.raises(InvalidSignature, match="does not match any configured secret"):
        verify_with_keys(body, callback_headers(body), signing_keys("wrong"), now_ms=NOW_MS)
    with pytest.raises(ValueError, match="at least one non-empty signing secret"):
        signing_keys([])


def test_the_fastapi_verifier_uses_only_public_names_of_the_receiver() -> None:
    source = Path(receiver_fastapi.__file__).read_text()
    imported = [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "timer_service.receiver"
        for alias in node.names
    ]
    private = [name for name in imported if name.startswith("_")]
    assert imported and not private, f"private names imported from receiver: {private}"
