"""What both clients send with every request, and which failures they try again.

Transport failures (connect errors, timeouts, 502/503/504) are retried with backoff only
where a repeat is safe (`Call.retry`): see the package's docstring.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
from tenacity import (
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from timer_service.client.errors import ServerError
from timer_service.client.requests import Call

log = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({502, 503, 504})
MAX_BACKOFF_S = 5.0


# The SDK ships alone (clients/python) and inside the service, whose CLI uses it.
DISTRIBUTIONS = ("callback-timer-service-sdk", "callback-timer-service")


def _sdk_version() -> str:
    # From the installed distribution, not `timer_service.__version__`: an editable install
    # can leave `timer_service` a namespace package (no __init__), and the import then failed.
    for distribution in DISTRIBUTIONS:
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "0+unknown"


USER_AGENT = f"timer-service-sdk/{_sdk_version()}"


def headers(token: str | None) -> dict[str, str]:
    sent = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return sent


def timeout_for(call: Call[Any], timeout_s: float) -> float:
    """The call's timeout: the client's, plus what a batch needs for its items."""
    return timeout_s + call.extra_timeout_s


def transient(exc: BaseException) -> bool:
    if isinstance(exc, ServerError):
        return exc.status in RETRIED_STATUSES
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol)


def retry_options(call: Call[Any], max_attempts: int, backoff_s: float) -> dict[str, Any]:
    """Keyword arguments of tenacity's `Retrying` / `AsyncRetrying` for one call."""
    return {
        "retry": retry_if_exception(transient),
        "stop": stop_after_attempt(max_attempts if call.retry else 1),
        "wait": wait_random_exponential(multiplier=backoff_s, max=MAX_BACKOFF_S),
        "before_sleep": before_sleep_log(log, logging.WARNING),
        "reraise": True,
    }
