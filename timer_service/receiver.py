"""The receiving end of a callback (docs/api.md, "Callback protocol"): check it, then read it.

    callback = verify_callback(body, headers, ["new-secret", "old-secret"])

Needs only pydantic. `CallbackVerifier`, the same check as a FastAPI dependency, is in
`receiver_fastapi` and is imported from here on first use, so FastAPI stays optional.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from timer_service.signing import signature_matches

if TYPE_CHECKING:
    from timer_service.receiver_fastapi import CallbackVerifier as CallbackVerifier

SIGNATURE_HEADER = "x-timer-signature"
TIMESTAMP_HEADER = "x-timer-timestamp"
IDEMPOTENCY_HEADER = "idempotency-key"


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
    idempotency_key: str


def verify_callback(
    body: bytes,
    headers: Mapping[str, str],
    secrets: str | Sequence[str],
    tolerance_s: float = 300,
    *,
    now_ms: int | None = None,
) -> Callback:
    """The callback in `body`, once its signature and timestamp check out; else InvalidSignature."""
    lowered = {name.lower(): value for name, value in headers.items()}
    timestamp = _required(lowered, TIMESTAMP_HEADER)
    signature = _required(lowered, SIGNATURE_HEADER)
    _check_fresh(timestamp, tolerance_s, time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    if not any(signature_matches(s, timestamp, body, signature) for s in secret_list(secrets)):
        raise InvalidSignature(f"{SIGNATURE_HEADER} does not match any configured secret")
    return _parse(body, lowered.get(IDEMPOTENCY_HEADER))


def secret_list(secrets: str | Sequence[str]) -> list[str]:
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    if not listed or not all(listed):
        raise ValueError("give at least one non-empty signing secret")
    return listed


def _required(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name, "").strip()
    if not value:
        raise InvalidSignature(f"missing {name} header")
    return value


def _check_fresh(timestamp: str, tolerance_s: float, now_ms: int) -> None:
    try:
        sent_ms = int(timestamp)
    except ValueError:
        raise InvalidSignature(f"{TIMESTAMP_HEADER} is not epoch ms: {timestamp!r}") from None
    skew_ms = now_ms - sent_ms
    if abs(skew_ms) > tolerance_s * 1000:
        raise InvalidSignature(
            f"{TIMESTAMP_HEADER} is {skew_ms / 1000:+.3f}s from now, beyond ±{tolerance_s}s"
        )


def _parse(body: bytes, idempotency_key: str | None) -> Callback:
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        # Always sent (docs/api.md); derived the same way when a proxy dropped it.
        key = idempotency_key or f"{doc.get('biz_type')}:{doc.get('job_id')}"
        return Callback.model_validate({**doc, "idempotency_key": key})
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise InvalidSignature(f"signed body is not a callback: {exc}") from None


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
