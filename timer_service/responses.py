"""What an endpoint answered to a callback, as kept with its attempt (docs/api.md,
"Attempt responses"). Pure: the sender hands over the bytes, this module decides
what of them is kept.

Kept per answer: a few headers by name (`KEPT_HEADERS`), each value at most
`HEADER_VALUE_BYTES`, and the body's first `BODY_BYTES`, decoded as UTF-8 with
replacement characters and cut on a character boundary; a body that is not text
is kept as the fact that it is binary. Per job only the last `RESPONSES_KEPT`
answers are kept, so a job's answers take at most about 21 KiB
(`MAX_RESPONSE_BYTES` each) whatever its endpoint sends back.

Never kept: the biz type's signing secrets and the request's signatures, even when
an endpoint echoes them back in a kept header or the body (they are replaced by
`REDACTED`), and every header not named below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

BODY_BYTES = 1024
HEADER_VALUE_BYTES = 128
# Read this much of a body before cutting it: room for a signature that straddles the
# cut to be seen whole and redacted (an entry "v1,<44 base64>" is 47 bytes).
CAPTURE_BYTES = BODY_BYTES + 64
# The answers of a job's last attempts kept: the default retry policy's every attempt.
RESPONSES_KEPT = 10

# An allow-list, not a deny-list: the headers that explain an answer. The rest can
# carry credentials (Set-Cookie, a debugging endpoint echoing our signature headers),
# and an endpoint choosing how many headers to send must not choose how much we store.
KEPT_HEADERS = (
    "Content-Type",  # how to read the body
    "Content-Length",  # how much there was, beyond the 1 KiB kept
    "Content-Encoding",  # why a body reads as binary (answers are not decompressed)
    "Retry-After",  # what set the retry's moment
    "Location",  # where a 3xx pointed (redirects are never followed)
    "WWW-Authenticate",  # what a 401 asked for
    "X-Request-Id",  # the endpoint's own name for the request, to find it in its logs
)
_KEPT_BY_LOWER = {name.lower(): name for name in KEPT_HEADERS}
MAX_RESPONSE_BYTES = BODY_BYTES + len(KEPT_HEADERS) * (HEADER_VALUE_BYTES + 20) + 100

REDACTED = "[redacted]"

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_TEXT_SUFFIXES = ("+json", "+xml")
_TEXT_FORMS = ("application/x-www-form-urlencoded",)
_BINARY_SHARE = 0.1  # more replacement characters than this among the decoded: binary


@dataclass(frozen=True, slots=True)
class AttemptResponse:
    """An answer as kept: `body` None when there was none, or when `binary`;
    `truncated` when the body was longer than what is kept."""

    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None
    truncated: bool = False
    binary: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "headers": dict(self.headers),
            "body": self.body,
            "truncated": self.truncated,
            "binary": self.binary,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttemptResponse:
        return cls(
            tuple(d.get("headers", {}).items()),
            d.get("body"),
            bool(d.get("truncated", False)),
            bool(d.get("binary", False)),
        )


def capture(
    headers: Iterable[tuple[str, str]],
    body: bytes,
    complete: bool,
    redact: Sequence[str] = (),
) -> AttemptResponse:
    """What is kept of an answer: `body`, its first bytes as read (up to
    CAPTURE_BYTES), `complete` when nothing came after them; every string of
    `redact` is replaced wherever it appears."""
    secrets = sorted({s for s in redact if s}, key=len, reverse=True)
    kept = _kept_headers(headers, secrets)
    content_type = dict(kept).get("Content-Type")
    encoding = dict(kept).get("Content-Encoding")
    if not complete:
        body = _whole_characters(body)
    if not body:
        return AttemptResponse(kept, None, not complete, False)
    text = body.decode("utf-8", errors="replace")
    if _is_binary(body, text, content_type, encoding):
        return AttemptResponse(kept, None, False, True)
    text = _redacted(text, secrets)
    cut = cut_utf8(text, BODY_BYTES)
    return AttemptResponse(kept, cut, len(cut) < len(text) or not complete, False)


def signature_values(header: str | None) -> list[str]:
    """The strings a `webhook-signature` header holds: each entry (`v1,<b64>`) and its
    signature alone, to redact from an answer that echoes them."""
    out: list[str] = []
    for entry in (header or "").split():
        out.append(entry)
        _, _, signature = entry.partition(",")
        if signature:
            out.append(signature)
    return out


def cut_utf8(text: str, limit_bytes: int) -> str:
    """`text` cut to at most `limit_bytes` of UTF-8, never inside a character, and
    always valid Unicode: a lone surrogate (aiohttp reads header bytes that are not
    UTF-8 as such) becomes "?", since no store can encode it."""
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit_bytes:
        return encoded.decode("utf-8")
    end = limit_bytes
    while end > 0 and encoded[end] & 0xC0 == 0x80:  # a continuation byte: inside a character
        end -= 1
    return encoded[:end].decode("utf-8", errors="replace")


def keep_last(responses: Sequence[AttemptResponse | None], kept: int) -> list[bool]:
    """Which of the answers (oldest first; None where an attempt got none) stay:
    the last `kept` of those that exist."""
    flags = [False] * len(responses)
    left = kept
    for i in range(len(responses) - 1, -1, -1):
        if left == 0:
            break
        if responses[i] is not None:
            flags[i] = True
            left -= 1
    return flags


def _whole_characters(body: bytes) -> bytes:
    """`body` without a character the read cut in two at its end."""
    start = len(body) - 1
    while start > 0 and len(body) - start < 4 and body[start] & 0xC0 == 0x80:
        start -= 1
    lead = body[start] if body else 0
    needs = 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1
    return body[:start] if start + needs > len(body) else body


def _kept_headers(
    headers: Iterable[tuple[str, str]], secrets: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    values: dict[str, list[str]] = {}
    for name, value in headers:
        canonical = _KEPT_BY_LOWER.get(name.lower())
        if canonical is not None:
            values.setdefault(canonical, []).append(value)
    return tuple(
        (name, cut_utf8(_redacted(", ".join(values[name]), secrets), HEADER_VALUE_BYTES))
        for name in KEPT_HEADERS
        if name in values
    )


def _is_binary(body: bytes, text: str, content_type: str | None, encoding: str | None) -> bool:
    if encoding is not None and encoding.strip().lower() not in ("", "identity"):
        return True  # compressed bytes: answers are stored as they came
    if b"\x00" in body:
        return True
    if content_type is not None and not _textual(content_type):
        return True
    return text.count("\ufffd") > _BINARY_SHARE * len(text)


def _textual(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return (
        media.startswith(_TEXT_TYPES)
        or media.endswith(_TEXT_SUFFIXES)
        or media.startswith(_TEXT_FORMS)
    )


def _redacted(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
