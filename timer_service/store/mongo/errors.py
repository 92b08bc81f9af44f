"""Driver errors as the domain's: a store that does not answer is `StoreUnavailable`,
whatever the driver called it, so callers (the API's 503, the broker's retries)
need not know PyMongo."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pymongo.errors import ConnectionFailure, ExecutionTimeout, WTimeoutError

from timer_service.errors import StoreUnavailable

# A timeout, a reset, no primary to talk to: the store is not answering now.
UNAVAILABLE = (ConnectionFailure, ExecutionTimeout, WTimeoutError)

P = TypeVar("P")


def translated(port: P) -> P:
    """Wrap every coroutine method of `port` so that driver unavailability surfaces
    as StoreUnavailable (with the driver's error as its cause, for the logs)."""
    for name, method in inspect.getmembers(port, inspect.iscoroutinefunction):
        if not name.startswith("_"):
            setattr(port, name, _translating(method))
    return port


def _translating(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await method(*args, **kwargs)
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the store did not answer ({type(exc).__name__})") from exc

    return call
