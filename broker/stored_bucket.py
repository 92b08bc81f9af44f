"""A lane's token bucket as its biz type's, across handovers and restarts.

Ownership: every biz type has its own quorum queue with single-active-consumer,
so at any time one broker across all replicas consumes a biz type's stream.
That is what makes a lane's token bucket and in-flight cap global: they live in
the one process that owns the stream. Across a handover (the owner dies or
loses its connection, and RabbitMQ redelivers what it held to the next
consumer) the new owner cannot know what the old one spent, so a redelivered
message reaching a lane that holds no message on an open channel (nothing, or
only what an earlier channel left) sets its bucket a burst below empty: the
stream goes on at the rate after a pause of (burst + 1) / rate, never with a
fresh burst on top of the old owner's, and the debt covers up to a burst that
an old owner still alive (its connection closed, which it learns a moment
late) may send after the handover. A lane made for a planned handover (the
old owner drains before it lets go) starts its first stream empty, without
the debt: its bucket refilled while it stood by.

And a lane never starts with more tokens than its biz type's bucket had when the
last lane to send for it let go (issue 30, break 3: a restarted broker, or a
stopped one's successor, spent a second burst on top of the one just spent). At
its first message, before it marks or sends anything, a lane takes the biz type's
bucket in the store (`BrokersPort.take_bucket`), which answers how its last taker
left it: the tokens then, refilled at the rate since (broker.ratelimit.start_tokens);
none when that taker never let go (a crash: it may have spent its burst just
before); a full bucket when nothing was ever sent for the biz type. A lane that
stops sending leaves the bucket, with its tokens, once its callbacks in flight are
done (`Lane.drain`). The take reads the store's clock too, which the skew guard
learns from (broker/skew.py): no lane sends by its host's clock alone.
"""

from __future__ import annotations

import logging

from broker.ratelimit import start_tokens
from broker.skew import SkewGuard
from timer_service.clock import Clock
from timer_service.model import BizType
from timer_service.store.ports.brokers import BrokersPort

log = logging.getLogger(__name__)

TAKE_RETRY_S = 0.5  # a take that failed is asked again after this
LEAVE_TIMEOUT_S = 2.0  # a leave the store does not answer within this is given up


class StoredBucket:
    """One lane's hold on its biz type's bucket in the store (None: the lane's own)."""

    def __init__(
        self, store: BrokersPort | None, taker: str, clock: Clock, skew: SkewGuard
    ) -> None:
        self._store = store
        self._taker = taker  # unique per lane: a leave names the take it ends
        self._clock = clock
        self._skew = skew
        self.known = store is None  # the lane may mark and send
        self.asked = store is None  # a take is on its way, or done (or none is needed)
        self._held = False  # taken, not yet left

    async def take(self, biz: BizType) -> float | None:
        """Take the bucket, retried until the store answers; the most tokens the lane
        may start with (None: no such biz type any more: as it is)."""
        assert self._store is not None
        while True:
            try:
                taken = await self._store.take_bucket(
                    biz.biz_type, self._taker, self._clock.now_ms()
                )
                break
            except Exception as exc:  # the store's: nothing goes out until it answers
                log.warning(
                    "bucket take failed", extra={"biz_type": biz.biz_type, "error": repr(exc)}
                )
                await self._clock.sleep(TAKE_RETRY_S)
        self._held = True
        if taken is None:
            return None
        self._skew.observe(self._clock.monotonic_s(), taken.at_ms)
        return start_tokens(taken, biz.rate_limit_per_s, biz.burst)

    async def leave(self, biz_type: str, tokens: float | None) -> None:
        """The lane sends nothing more: the bucket holds `tokens` (None: unlimited)."""
        if self._store is None or not self._held:
            return
        self._held = False  # left once
        try:
            await self._clock.wait_for(
                self._store.leave_bucket(biz_type, self._taker, tokens, self._clock.now_ms()),
                LEAVE_TIMEOUT_S,
            )
        except Exception as exc:  # left taken: the next taker starts empty
            log.warning("bucket leave failed", extra={"biz_type": biz_type, "error": repr(exc)})
