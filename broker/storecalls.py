"""Store calls retried through transient failures (tenacity), bounded, counted."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, stop_after_delay, wait_exponential

from timer_service.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")


async def retried(
    operation: str,
    call: Callable[[], Awaitable[T]],
    metrics: Metrics,
    give_up_after_s: float,
) -> T:
    """Run `call` until it succeeds or `give_up_after_s` passes; then raise its error."""
    try:
        return await call()  # the usual case, without tenacity's per-call cost
    except Exception as exc:
        metrics.store_error(operation)
        log.warning(
            "store call failed, retrying", extra={"operation": operation, "error": repr(exc)}
        )

    def count(state: object) -> None:
        metrics.store_error(operation)
        outcome = getattr(state, "outcome", None)
        error = outcome.exception() if outcome is not None else None
        log.warning(
            "store call failed, retrying", extra={"operation": operation, "error": repr(error)}
        )

    async for attempt in AsyncRetrying(
        stop=stop_after_delay(give_up_after_s),
        wait=wait_exponential(multiplier=0.05, max=2.0),
        before_sleep=count,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover
