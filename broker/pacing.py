"""A lane's pace of marking, learnt from the answer times it sees: how far ahead of a
message's moment it asks the store (twice the store's usual answer time, within
bounds), and how many messages could go out within a window (the rate limit, and the
in-flight cap at the callbacks' usual round trip)."""

from __future__ import annotations

import math

from broker.ratelimit import TokenBucket

CHECK_AHEAD_MS = 80  # ask the store this long before a job's moment, at least
MAX_CHECK_AHEAD_MS = 500  # ... and at most, however slow the store is
# A mark, on the beat before the look-ahead reaches the next message, takes what comes
# due within the look-ahead and this span beyond it: a steady flow is then marked a
# span at a time, not a message or two each time the look-ahead moves on (at 500
# jobs/s that was a mark per job). The price: a cancel answers "in flight" up to this
# much earlier before the send.
MARK_SPAN_MS = 100
MAX_CHECK_BATCH = 500


class Pacing:
    def __init__(self) -> None:
        self.check_ahead_ms = CHECK_AHEAD_MS
        self._check_ms_avg = 0.0  # moving average of the store's answer time
        self._callback_ms_avg: float | None = None  # ... and of a callback's round trip

    def learn_check_time(self, took_ms: float) -> None:
        """Look ahead twice the store's usual answer time, so sends stay on time."""
        self._check_ms_avg = 0.8 * self._check_ms_avg + 0.2 * took_ms
        wanted = max(CHECK_AHEAD_MS, round(2 * self._check_ms_avg))
        self.check_ahead_ms = min(MAX_CHECK_AHEAD_MS, wanted)

    def learn_callback_time(self, took_ms: float) -> None:
        took_ms = max(1.0, took_ms)  # a callback answered within the clock's tick
        avg = self._callback_ms_avg
        self._callback_ms_avg = took_ms if avg is None else 0.8 * avg + 0.2 * took_ms

    def could_go(
        self, bucket: TokenBucket, bucket_s: float, cap: int, in_flight: int, window_ms: float
    ) -> int:
        """How many upcoming messages could go out within `window_ms`: what the rate
        limit allows, and what the in-flight cap lets through at the callbacks' usual
        round trip (one round of the cap until a callback has been timed). A fixed
        round of the cap per mark capped a fast biz type at a few hundred per second of
        the store's answer time, however quickly its callbacks came back."""
        rounds = 1.0 if self._callback_ms_avg is None else window_ms / self._callback_ms_avg
        slots = max(0, cap - in_flight) + math.ceil(cap * max(1.0, rounds))
        tokens = bucket.available(bucket_s, window_ms / 1000)
        return slots if tokens >= slots else min(slots, math.floor(tokens))

    def mark_budget(
        self, bucket: TokenBucket, bucket_s: float, cap: int, in_flight: int, marked: int
    ) -> int:
        """How many more messages to mark now: those that could go out within the
        check-ahead window beyond the `marked` already. A lane held back by its rate
        limit, once it has to mark, marks for the longest window (MAX_CHECK_AHEAD_MS):
        one job per token would cost the store a mark per callback."""
        args = (bucket, bucket_s, cap, in_flight)
        budget = self.could_go(*args, self.check_ahead_ms + MARK_SPAN_MS) - marked
        if budget > 0 and not bucket.unlimited:
            budget = max(budget, self.could_go(*args, MAX_CHECK_AHEAD_MS) - marked)
        return min(budget, MAX_CHECK_BATCH)
