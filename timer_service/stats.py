"""A biz type's figures for the console (docs/api.md, "Stats"), from what the store
holds, so they are right whichever process sent the callbacks. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from timer_service.model import BizType, JobState
from timer_service.store.ports.console import RecentAttempt

OUTCOME_WINDOW_MS = 60_000  # delivered_last_minute, failed_last_minute
LATENESS_WINDOW_MS = 300_000  # lateness_p99_ms: first attempts of the last 5 minutes


def p99(values: Sequence[int]) -> int | None:
    """The nearest-rank 99th percentile; None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def biz_stats(
    biz: BizType,
    counts: Mapping[JobState, int],
    attempts: Sequence[RecentAttempt],
    now_ms: int,
) -> dict[str, Any]:
    """`attempts`: this biz type's attempts of the last `LATENESS_WINDOW_MS` at least.
    An attempt with no error delivered; one with an error ended in a retry or dead.
    Lateness is the service's: first attempts of jobs registered at or before their due
    time (one registered an hour past due fires at once, an hour "late", and would
    swamp the p99 of everything else)."""
    minute = [a.attempt for a in attempts if a.attempt.at >= now_ms - OUTCOME_WINDOW_MS]
    late = [
        max(0, a.attempt.at - a.due_at)
        for a in attempts
        if a.attempt.attempt == 1
        and a.attempt.at >= now_ms - LATENESS_WINDOW_MS
        and a.created_at <= a.due_at
    ]
    return {
        "biz_type": biz.biz_type,
        "paused": biz.paused,
        "rate_limit_per_s": biz.rate_limit_per_s,
        "counts": {state.value: counts.get(state, 0) for state in JobState},
        "delivered_last_minute": sum(1 for a in minute if a.error is None),
        "failed_last_minute": sum(1 for a in minute if a.error is not None),
        "lateness_p99_ms": p99(late),
    }
