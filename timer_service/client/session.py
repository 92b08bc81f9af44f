"""What both clients send with every request, and how long they wait for an answer."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TypeVar

import httpx

from timer_service.client.requests import Call
from timer_service.client.retrying import Retrier, RetrySettings

T = TypeVar("T")

MAX_CONNECTIONS = 100  # httpx's default pool size

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


def timeout_for(call: Call[T], timeout_s: float, settings: RetrySettings) -> httpx.Timeout:
    """The call's timeout: the client's, plus what a batch needs for its items. Waiting
    for a free connection of the client's pool is bounded by the retry deadline instead:
    a burst of calls through one client queues there, and that wait is the caller's."""
    each_s = timeout_s + call.extra_timeout_s
    return httpx.Timeout(each_s, pool=max(each_s, settings.deadline_s))


def retrier_for(call: Call[T], settings: RetrySettings, clock: Callable[[], float]) -> Retrier:
    return Retrier(call.idempotent, f"{call.method} {call.path}", settings, clock)
