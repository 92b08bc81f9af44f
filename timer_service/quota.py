"""The registration quota: how many jobs a biz type may create per second, per API process.

A biz type's `registration_rate_per_s` and `registration_burst` (null = unlimited)
make a token bucket that starts full with `registration_burst` tokens and refills
at the rate. A create of n jobs (one, or a batch's items of that biz type) needs
min(n, burst) tokens in the bucket and then takes n, so a batch larger than the
burst goes through when the bucket is full and leaves it owing the rest. A request
refused is told when it would pass (`Retry-After`). Over any W seconds a process
accepts at most burst + rate * W + (its last batch beyond the burst) creates.

The buckets live in each API process: with k replicas behind a balancer the biz
type gets up to k times its quota (docs/operations.md, "Overload", says why that is
acceptable: the quota protects the store from one tenant's burst, and each replica
protects its share of the store's capacity). Pure code: time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from timer_service.errors import TimerServiceError
from timer_service.model import BizType

EPSILON = 1e-9


def default_registration_burst(rate_per_s: float) -> int:
    """A quota without a burst takes one second's worth at once (at least one job)."""
    return max(1, math.ceil(rate_per_s))


class OverQuota(TimerServiceError):
    """The biz type's registration quota is used up for now."""

    def __init__(self, biz_type: str, retry_after_s: int, rate_per_s: float, burst: int) -> None:
        super().__init__(
            f"Biz type {biz_type!r} may create {rate_per_s:g} jobs/s (burst {burst}) on this"
            f" API process; retry in {retry_after_s} s."
        )
        self.biz_type = biz_type
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class _Bucket:
    rate_per_s: float
    burst: int
    tokens: float
    at_ms: int

    def refill(self, now_ms: int) -> None:
        if now_ms > self.at_ms:
            earned = (now_ms - self.at_ms) * self.rate_per_s / 1000
            self.tokens = min(float(self.burst), self.tokens + earned)
            self.at_ms = now_ms

    def wait_s(self, count: int) -> float:
        """Seconds until `count` jobs may be created (0: now); the bucket is refilled."""
        missing = min(count, self.burst) - self.tokens
        return 0.0 if missing <= EPSILON else missing / self.rate_per_s


class RegistrationQuota:
    """One bucket per limited biz type; a config change (a PUT) re-sizes it."""

    def __init__(self) -> None:
        self._buckets: dict[str, _Bucket] = {}

    def admit(self, counts: Mapping[str, int], configs: Mapping[str, BizType], now_ms: int) -> None:
        """Take `counts[biz_type]` tokens of each biz type, all or none; OverQuota (the
        first biz type found short, with the longest wait of any) when one is short."""
        buckets: list[tuple[_Bucket, int]] = []
        short: tuple[str, float, _Bucket] | None = None
        for biz_type, count in counts.items():
            bucket = self._bucket(configs.get(biz_type), now_ms)
            if bucket is None or count <= 0:
                continue
            wait_s = bucket.wait_s(count)
            if wait_s > 0 and (short is None or wait_s > short[1]):
                short = (biz_type, wait_s, bucket)
            buckets.append((bucket, count))
        if short is not None:
            biz_type, wait_s, bucket = short
            raise OverQuota(biz_type, max(1, math.ceil(wait_s)), bucket.rate_per_s, bucket.burst)
        for bucket, count in buckets:
            bucket.tokens -= count

    def _bucket(self, biz: BizType | None, now_ms: int) -> _Bucket | None:
        if biz is None or biz.registration_rate_per_s is None:
            if biz is not None:
                self._buckets.pop(biz.biz_type, None)
            return None
        rate = biz.registration_rate_per_s
        burst = biz.registration_burst or default_registration_burst(rate)
        bucket = self._buckets.get(biz.biz_type)
        if bucket is None:
            bucket = self._buckets[biz.biz_type] = _Bucket(rate, burst, float(burst), now_ms)
            return bucket
        bucket.refill(now_ms)
        if (bucket.rate_per_s, bucket.burst) != (rate, burst):
            # Tokens earned carry over, up to the new burst; a debt stays owed.
            bucket.rate_per_s, bucket.burst = rate, burst
            bucket.tokens = min(bucket.tokens, float(burst))
        return bucket
