"""W3C Trace Context (https://www.w3.org/TR/trace-context/): reading `traceparent` and
`tracestate` as a job's registration gives them, and the `traceparent` of a child span.
Pure: no I/O, no OpenTelemetry (docs/operations.md, "Traces").

A malformed header is ignored, never an error: the spec's rule for a receiver, and a
caller's tracing must not be able to fail its registration.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

_HEX_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_HEX_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_HEX_BYTE = re.compile(r"[0-9a-f]{2}")
_VERSION_00_LENGTH = 55  # "00-" + 32 + "-" + 16 + "-" + 2
_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16

# tracestate: at most 32 list members, each `key=value`; we keep at most 512
# characters (what the spec asks every vendor to propagate at least).
MAX_TRACESTATE_CHARS = 512
MAX_TRACESTATE_MEMBERS = 32
_TRACESTATE_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)


@dataclass(frozen=True, slots=True)
class TraceParent:
    trace_id: str  # 32 lowercase hex digits, not all zero
    parent_id: str  # 16 lowercase hex digits, not all zero: the caller's span
    flags: str  # 2 hex digits; bit 0 is "sampled"

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.parent_id}-{self.flags}"

    def child(self, span_id: str) -> str:
        """The `traceparent` of span `span_id` in this trace, a child of this parent."""
        return f"00-{self.trace_id}-{span_id}-{self.flags}"

    @property
    def sampled(self) -> bool:
        return bool(int(self.flags, 16) & 1)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """What a job keeps of its registration's trace context."""

    traceparent: str
    tracestate: str | None = None


def parse_traceparent(value: str | None) -> TraceParent | None:
    """A valid `traceparent`, or None. A version above 00 is read as 00 (its first
    four fields; more may follow a dash), as the spec tells a 00 receiver to."""
    if value is None:
        return None
    value = value.strip(" \t")
    if len(value) < _VERSION_00_LENGTH:
        return None
    version, rest = value[:2], value[2:]
    if not _HEX_BYTE.fullmatch(version) or version == "ff":
        return None
    if version == "00" and len(value) != _VERSION_00_LENGTH:
        return None
    if len(value) > _VERSION_00_LENGTH and value[_VERSION_00_LENGTH] != "-":
        return None
    if rest[0] != "-" or rest[33] != "-" or rest[50] != "-":
        return None
    trace_id, parent_id, flags = rest[1:33], rest[34:50], rest[51:53]
    if not (
        _HEX_TRACE_ID.fullmatch(trace_id)
        and _HEX_SPAN_ID.fullmatch(parent_id)
        and _HEX_BYTE.fullmatch(flags)
    ):
        return None
    if trace_id == _INVALID_TRACE_ID or parent_id == _INVALID_SPAN_ID:
        return None
    return TraceParent(trace_id, parent_id, flags)


def parse_tracestate(value: str | None) -> str | None:
    """A valid `tracestate` with its empty members dropped, or None (absent, empty,
    malformed or over 512 characters: the spec lets a receiver drop it whole)."""
    if value is None or len(value) > MAX_TRACESTATE_CHARS:
        return None
    members = [m.strip(" \t") for m in value.split(",")]
    members = [m for m in members if m]
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    if not all(_TRACESTATE_MEMBER.fullmatch(m) for m in members):
        return None
    keys = [m.partition("=")[0] for m in members]
    if len(set(keys)) != len(keys):
        return None
    return ",".join(members)


def trace_context(traceparents: list[str], tracestates: list[str]) -> TraceContext | None:
    """The context a request's headers carry (each header's values, in order), or None.
    Several `traceparent` headers make it invalid; several `tracestate` headers are
    one list, joined with commas (RFC 9110 field combination)."""
    if len(traceparents) != 1:
        return None
    parent = parse_traceparent(traceparents[0])
    if parent is None:
        return None
    state = parse_tracestate(",".join(tracestates)) if tracestates else None
    return TraceContext(str(parent), state)


def new_span_id() -> str:
    """A random span id (16 hex digits, never all zero)."""
    while True:
        span_id = secrets.token_hex(8)
        if span_id != _INVALID_SPAN_ID:
            return span_id
