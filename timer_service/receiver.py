"""The receiving end of a callback (docs/api.md, "Callback protocol"): check it, then read it.

Callbacks are signed as the Standard Webhooks specification says (timer_service.signing
has the scheme and how a secret becomes a key); this module verifies them and hands back
only what was signed: the body, and the idempotency key from the signed `webhook-id`.

    callback = verify_callback(body, headers, ["whsec_new...", "whsec_old..."])

A receiver that verifies many callbacks makes the keys once, with `signing_keys`, and
calls `verify_with_keys` per request.

Needs only pydantic. `CallbackVerifier`, the same check as a FastAPI dependency, is in
`receiver_fastapi` and is imported from here on first use, so FastAPI stays optional.
"""

from __future__ import annotations

import base64
import hmac
import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from timer_service.signing import SIGNATURE_VERSION, digest, signing_key

if TYPE_CHECKING:
    from timer_service.receiver_fastapi import CallbackVerifier as CallbackVerifier

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SIGNED_HEADERS = (ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)

# Epoch seconds, canonical (no sign, no leading zero): the text signed is the text parsed.
_TIMESTAMP = re.compile(r"0|[1-9][0-9]{0,14}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_OWS = " \t"  # what HTTP allows around a header value


class InvalidSignature(ValueError):
    """The callback is not signed by a known secret, or its timestamp is out of tolerance."""


class Callback(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    biz_type: str
    job_id: str
    payload: Any = None
    due_at: int
    fired_at: int
    attempt: int
    labels: dict[str, str] = Field(default_factory=dict)
    idempotency_key: str

    @field_validator("labels", mode="before")
    @classmethod
    def _no_labels_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


def verify_callback(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    tolerance_s: float = 300,
    *,
    now_ms: int | None = None,
) -> Callback:
    """The callback in `body`, once its signature and timestamp check out; else InvalidSignature.

    `secrets`: one secret or several (during a rotation), each `whsec_...` or a plain string;
    a secret that is not usable raises ValueError (a configuration error, not a bad callback).
    """
    return verify_with_keys(body, headers, signing_keys(secrets), tolerance_s, now_ms=now_ms)


def signing_keys(secrets: str | Sequence[str]) -> list[bytes]:
    """The HMAC keys of `secrets` (one or several, each `whsec_...` or a plain string), to
    make once where callbacks are verified many times; ValueError for an unusable one."""
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    if not listed or not all(isinstance(s, str) and s for s in listed):
        raise ValueError("give at least one non-empty signing secret (str)")
    return [signing_key(s) for s in listed]


def verify_with_keys(
    body: bytes,
    headers: Mapping[str, str],
    keys: Sequence[bytes],
    tolerance_s: float = 300,
    *,
    now_ms: int | None = None,
) -> Callback:
    """`verify_callback` with keys made by `signing_keys`: what a receiver built on another
    framework calls per request (`CallbackVerifier` does, for FastAPI)."""
    signed = _signed_headers(headers)
    msg_id, timestamp = signed[ID_HEADER], signed[TIMESTAMP_HEADER]
    if not _TIMESTAMP.fullmatch(timestamp):
        raise InvalidSignature(f"{TIMESTAMP_HEADER} is not epoch seconds: {timestamp!r}")
    _check_fresh(
        int(timestamp), tolerance_s, time.time_ns() // 1_000_000 if now_ms is None else now_ms
    )
    candidates = _v1_signatures(signed[SIGNATURE_HEADER])
    expected = [digest(key, msg_id, timestamp, body) for key in keys]
    # Every pair is compared, so the time taken says nothing about which one matched.
    matches = [hmac.compare_digest(e, c) for e in expected for c in candidates]
    if not any(matches):
        raise InvalidSignature(f"{SIGNATURE_HEADER} does not match any configured secret")
    return _parse(body, msg_id)


def _signed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The three Standard Webhooks headers, names matched case-insensitively; each present
    once (or repeated with the same value), ASCII and non-empty."""
    found: dict[str, str] = {}
    for name, value in headers.items():
        if not (isinstance(name, str) and name.isascii()):
            continue
        lowered = name.lower()
        if lowered not in SIGNED_HEADERS:
            continue
        if not isinstance(value, str) or not value.isascii():
            raise InvalidSignature(f"{lowered} header is not ASCII text")
        value = value.strip(_OWS)
        if found.setdefault(lowered, value) != value:
            raise InvalidSignature(f"{lowered} header given twice with different values")
    for name in SIGNED_HEADERS:
        if not found.get(name):
            raise InvalidSignature(f"missing {name} header")
    return found


def _check_fresh(sent_s: int, tolerance_s: float, now_ms: int) -> None:
    skew_ms = now_ms - sent_s * 1000
    if abs(skew_ms) > tolerance_s * 1000:
        raise InvalidSignature(
            f"{TIMESTAMP_HEADER} is {skew_ms / 1000:+.3f}s from now, beyond ±{tolerance_s}s"
        )


def _v1_signatures(header: str) -> list[bytes]:
    """The `v1` signatures of a `webhook-signature` value; other versions are skipped."""
    found = []
    for entry in header.split():
        version, comma, encoded = entry.partition(",")
        if not (version and comma):
            raise InvalidSignature(f"{SIGNATURE_HEADER} entry is not <version>,<signature>")
        if version != SIGNATURE_VERSION:
            continue
        if not _BASE64.fullmatch(encoded) or len(encoded) % 4:
            raise InvalidSignature(f"{SIGNATURE_HEADER} v1 entry is not base64")
        found.append(base64.b64decode(encoded))
    if not found:
        raise InvalidSignature(f"{SIGNATURE_HEADER} has no {SIGNATURE_VERSION} signature")
    return found


def _parse(body: bytes, msg_id: str) -> Callback:
    """The signed body as a Callback; its key is the signed webhook-id, which must name it."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidSignature(f"signed body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidSignature("signed body is not a callback: not a JSON object")
    try:
        callback = Callback.model_validate({**doc, "idempotency_key": msg_id})
    except ValidationError as exc:
        raise InvalidSignature(f"signed body is not a callback: {exc}") from None
    if msg_id != f"{callback.biz_type}:{callback.job_id}":
        raise InvalidSignature(
            f"{ID_HEADER} {msg_id!r} is not the body's <biz_type>:<job_id>"
            f" {callback.biz_type}:{callback.job_id}"
        )
    return callback


def __getattr__(name: str) -> Any:
    if name != "CallbackVerifier":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from timer_service.receiver_fastapi import CallbackVerifier
    except ModuleNotFoundError as exc:
        if exc.name not in ("fastapi", "starlette"):
            raise
        raise ImportError(
            "CallbackVerifier is a FastAPI dependency and needs FastAPI: "
            "pip install 'callback-timer-service-sdk[fastapi]'"
        ) from exc
    return CallbackVerifier
