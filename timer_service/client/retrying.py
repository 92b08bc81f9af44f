"""Which failed tries both clients repeat, and how long they wait first.

- 429, and 503 from the API's admission gate (problem type `.../overloaded`), were
  refused before any work: every call is repeated, after the server's `Retry-After`.
- Connection refused, connect timeout, no free connection in the pool: the request never
  left, so every call is repeated too.
- Anything else transient (a 502/503/504, a read timeout, a dropped connection) may have
  happened on the server: repeated only for calls whose repeat is safe
  (`Call.idempotent`: reads, PUT, DELETE, a merge patch, creates, whose `job_id` the SDK
  fixes before the first try).

A `Retry-After` is honoured (never retried sooner; a little later, at random, so that a
shed burst does not come back all at once); without one, exponential backoff with full
jitter. No wait goes past the caller's deadline, counted from the call's first try: when
the next try could not start before it, the last error is raised at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from timer_service.client.errors import TimerApiError

log = logging.getLogger(__name__)

DEFAULT_RETRY_DEADLINE_S = 60.0
MAX_BACKOFF_S = 5.0
RETRIED_STATUSES = frozenset({429, 502, 503, 504})
# A wait asked by Retry-After is stretched by up to this share of itself, at random.
RETRY_AFTER_JITTER = 0.5
OVERLOADED_TYPE_SUFFIX = "/overloaded"

# Raised before anything was sent: safe to repeat for every call.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True, slots=True)
class RetrySettings:
    deadline_s: float = DEFAULT_RETRY_DEADLINE_S
    # Tries that fail without a Retry-After (the service unreachable, a 502/504): a caller
    # learns soon that nobody answers. Answers with one are bounded by the deadline only.
    max_attempts: int | None = 4
    backoff_s: float = 0.2
    max_backoff_s: float = MAX_BACKOFF_S


def refused_before_work(exc: BaseException) -> bool:
    """The server (or the network) did nothing with the request: any call may repeat it."""
    if isinstance(exc, _NOT_SENT):
        return True
    if not isinstance(exc, TimerApiError):
        return False
    if exc.status == 429:
        return True
    kind = exc.problem.get("type")
    return exc.status == 503 and isinstance(kind, str) and kind.endswith(OVERLOADED_TYPE_SUFFIX)


def transient(exc: BaseException) -> bool:
    """A failure that may pass: worth repeating when a repeat is safe."""
    if isinstance(exc, TimerApiError):
        return exc.status in RETRIED_STATUSES
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol)


class Retrier:
    """One call's tries: `wait_s` after each failure says how long to wait, or None."""

    def __init__(
        self,
        idempotent: bool,
        what: str,
        settings: RetrySettings,
        clock: Callable[[], float],
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._idempotent = idempotent
        self._what = what  # "METHOD /path", for the log
        self._settings = settings
        self._clock = clock
        self._rand = rand
        self._started = clock()
        self._unguided = 0  # failures that came without a Retry-After

    def wait_s(self, attempt: int, exc: BaseException) -> float | None:
        """Seconds to wait before try `attempt + 1`, or None: give up, raise `exc`."""
        settings = self._settings
        repeatable = refused_before_work(exc) or (self._idempotent and transient(exc))
        if not repeatable:
            return None
        asked = exc.retry_after_s if isinstance(exc, TimerApiError) else None
        if asked is None:
            self._unguided += 1
            if settings.max_attempts is not None and self._unguided >= settings.max_attempts:
                return None
        if asked is not None:
            wait = asked * (1 + RETRY_AFTER_JITTER * self._rand())
        else:
            ceiling = min(settings.max_backoff_s, settings.backoff_s * 2 ** (attempt - 1))
            wait = ceiling * self._rand()
        if self._clock() - self._started + wait > settings.deadline_s:
            return None
        log.info("retrying %s in %.2f s (try %d failed: %s)", self._what, wait, attempt, exc)
        return wait
