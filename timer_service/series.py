"""A biz type's last hour minute by minute, for the console's charts (docs/api.md,
"Series"): callbacks delivered and failed, and the lateness p50 / p99 of first
attempts, from the attempts the store keeps on each job (every attempt, for as long as
the job is retained: an hour is always there). Pure.

Lateness counts as in `stats`: first attempts of jobs registered at or before their
due time, so that a job registered an hour past due does not swamp the rest."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from timer_service.store.ports.console import RecentAttempt

SERIES_WINDOW_MS = 3_600_000
SERIES_STEP_MS = 60_000


def nearest_rank(ordered: Sequence[int], q: float) -> int | None:
    """The nearest-rank `q` quantile of sorted values; None of none."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def series_start(
    now_ms: int, window_ms: int = SERIES_WINDOW_MS, step_ms: int = SERIES_STEP_MS
) -> int:
    """The first step's start: steps are aligned to `step_ms`, and the last one is the
    step `now_ms` is in (still filling)."""
    return (now_ms // step_ms + 1) * step_ms - window_ms


def minute_series(
    attempts: Sequence[RecentAttempt],
    now_ms: int,
    window_ms: int = SERIES_WINDOW_MS,
    step_ms: int = SERIES_STEP_MS,
) -> dict[str, Any]:
    """`attempts`: one biz type's, made at or after `series_start(now_ms, ...)` (others
    are ignored). An attempt with no error delivered; one with an error ended in a retry
    or dead. Each point counts the attempts made in `[at, at + step_ms)`."""
    start = series_start(now_ms, window_ms, step_ms)
    steps = window_ms // step_ms
    delivered = [0] * steps
    failed = [0] * steps
    late: list[list[int]] = [[] for _ in range(steps)]
    for recent in attempts:
        attempt = recent.attempt
        i = (attempt.at - start) // step_ms
        if not 0 <= i < steps:
            continue
        if attempt.error is None:
            delivered[i] += 1
        else:
            failed[i] += 1
        if attempt.attempt == 1 and recent.created_at <= recent.due_at:
            late[i].append(max(0, attempt.at - recent.due_at))
    points = []
    for i in range(steps):
        ordered = sorted(late[i])
        points.append(
            {
                "at": start + i * step_ms,
                "delivered": delivered[i],
                "failed": failed[i],
                "lateness_p50_ms": nearest_rank(ordered, 0.50),
                "lateness_p99_ms": nearest_rank(ordered, 0.99),
            }
        )
    return {"from": start, "to": start + window_ms, "step_ms": step_ms, "points": points}
