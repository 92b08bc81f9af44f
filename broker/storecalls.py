"""Store calls retried through transient failures (tenacity), bounded, counted.

The waits between tries and the bound are on the injected clock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_not_exception_type, wait_exponential

from timer_service.clock import Clock
from timer_service.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")


async def retried(
    operation: str,
    call: Callable[[], Awaitable[T]],
    metrics: Metrics,
    clock: Clock,
    give_up_after_s: float,
    final: tuple[type[Exception], ...] = (),
) -> T:
    """Run `call` until it succeeds or `give_up_after_s` passes; then raise its error.
    An error of a `final` type is an answer, not a failure: raised at once."""
    try:
        return await call()  # the usual case, without tenacity's per-call cost
    except final:
        raise
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

    started_s = clock.monotonic_s()

    def past_bound(_: RetryCallState) -> bool:
        return clock.monotonic_s() - started_s >= give_up_after_s

    async for attempt in AsyncRetrying(
        stop=past_bound,
        wait=wait_exponential(multiplier=0.05, max=2.0),
        before_sleep=count,
        sleep=clock.sleep,
        reraise=True,
        retry=retry_if_not_exception_type(final),
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable")  # pragma: no cover
