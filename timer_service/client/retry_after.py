"""`Retry-After` (RFC 9110, 10.2.3) as seconds to wait: a count of seconds or an HTTP date."""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime

# A header asking for longer than this is read as this: a typo or a clock far off should
# not park a caller for a day (the caller's retry deadline bounds the wait anyway).
MAX_RETRY_AFTER_S = 3600.0


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds to wait from `now_s` (epoch seconds; default the wall clock), or None when
    the header is absent or unreadable. A date in the past is 0."""
    if value is None:
        return None
    text = value.strip()
    seconds: float | None
    try:
        seconds = float(text)
    except ValueError:
        seconds = _until_date(text, time.time() if now_s is None else now_s)
    if seconds is None or seconds != seconds:  # absent, unreadable, NaN
        return None
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def _until_date(text: str, now_s: float) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses as naive
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now_s
