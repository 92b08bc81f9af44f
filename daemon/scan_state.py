"""What the scanner keeps of each second, and how it is tuned (daemon/scanner.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from daemon.wheel import Timer
from timer_service.constants import MAX_CLAIM_AHEAD_MS
from timer_service.dispatch import SecondEntry
from timer_service.settings import Settings


@dataclass(slots=True)
class Held:
    """A loaded second: the version read before loading it, and its known pending jobs."""

    entry: SecondEntry
    jobs: dict[str, Timer[int]] = field(default_factory=dict)
    # Set while the second changed after it was loaded: instead of re-reading it,
    # claim rounds sweep its whole range (see `_start_sweep`).
    sweep: list[Timer[int]] | None = None


@dataclass(slots=True)
class BacklogSecond:
    entry: SecondEntry
    due: list[int]  # next_attempt_at of its pending jobs, sorted
    done: int = 0  # how many of `due` are claimed


# A claim also takes what falls due up to this much after its own window: at low rates
# one round per ~half second instead of one per job (4 commands each on the wire).
COALESCE_MS = 500
# ... but only about this many jobs' worth at the current rate (`ClaimPace`). A claim
# of 64 costs about 0.09 store round trips per fired job with its mark and outcome,
# one of 32 about 0.13 (bench/roundtrips_bench.py --group); delivery p99 at 500/s
# the same (bench/README.md).
COALESCE_JOBS = 64


@dataclass(slots=True)
class ScanConfig:
    claim_ahead_ms: int
    lookahead_ms: int
    catchup_rate_per_s: int
    claim_batch: int = 1000  # at most this many jobs per claim round trip
    min_wake_ms: int = 50  # claims are batched: at most one round per second per this
    sweep_step_ms: int = 100  # a changed second is claimed in rounds this far apart
    safety_poll_ms: int = 10_000
    page: int = 1000
    max_backlog_seconds_per_step: int = 200
    # A claim at t takes a second's jobs due by t + claim_ahead + coalesce (the API's
    # bound: claimed at most 2 s ahead), so the next ones need no claim of their own.
    coalesce_ms: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> ScanConfig:
        claim_ahead_ms = min(settings.claim_ahead_ms, MAX_CLAIM_AHEAD_MS)
        return cls(
            claim_ahead_ms=claim_ahead_ms,
            coalesce_ms=max(0, min(COALESCE_MS, MAX_CLAIM_AHEAD_MS - claim_ahead_ms)),
            lookahead_ms=max(settings.lookahead_ms, settings.claim_ahead_ms + 1000),
            catchup_rate_per_s=settings.catchup_rate_per_s,
            claim_batch=settings.claim_batch,
        )


def claim_limit(held: Held | None, batch: int) -> int | None:
    """A claim's bound, only where it can bite (a bounded claim reads the batch-th job's
    position first, one more round trip): none for a second loaded with at most a batch
    of jobs and not written into since; `batch` for any other."""
    small = held is not None and held.sweep is None and len(held.jobs) <= batch
    return None if small else batch


@dataclass(slots=True)
class ClaimPace:
    """How far past its own window a live claim reaches: `most_ms` while claims are
    few, less as they grow, so that a window holds about `jobs` jobs at the rate of the
    last second. A trickle then costs one claim round per window instead of one per
    job, while a steady flow still goes out in groups of about `jobs`: 500 ms windows
    at 500 jobs/s handed the broker 250 messages at once, and its sends due meanwhile
    waited (delivery p99 3.4 -> 8.2 ms, bench/lateness_bench.py --store memory)."""

    most_ms: int
    jobs: int = COALESCE_JOBS
    _recent: deque[tuple[int, int]] = field(default_factory=deque)
    _count: int = 0

    def window_ms(self, now: int) -> int:
        while self._recent and self._recent[0][0] <= now - 1000:
            self._count -= self._recent.popleft()[1]
        if self._count <= 0:
            return self.most_ms
        return min(self.most_ms, self.jobs * 1000 // self._count)

    def claimed(self, now: int, count: int) -> None:
        if count:
            self._recent.append((now, count))
            self._count += count
