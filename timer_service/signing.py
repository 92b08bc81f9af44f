"""The callback signature (docs/api.md, "Callback protocol"), shared by sender and receiver."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_PREFIX = "sha256="


def sign(secret: str, timestamp_ms: int | str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>`."""
    message = f"{timestamp_ms}.".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def signature_matches(secret: str, timestamp_ms: int | str, body: bytes, signature: str) -> bool:
    return hmac.compare_digest(sign(secret, timestamp_ms, body), signature)
