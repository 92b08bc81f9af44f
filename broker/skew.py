"""The skew guard: a callback waits for the store's clock as well as this host's.

Due times are compared on the service's side, and the store's clock is the one
every process shares. A broker host whose clock runs fast would otherwise send
early by exactly its lead. The broker learns the store's clock from a round trip
it makes anyway (its heartbeat, which reads the store's time back with the
write): the store's time `store_ms` was read somewhere between sending the call
(local `sent_ms`) and its answer (local `answered_ms`), so at `answered_ms` the
store's clock showed at least `store_ms`. From then on, at local time `t`, the
store's clock shows at least `t + (store_ms - answered_ms)`: a lower bound that
the round trip's own length only makes safer. Samples come every heartbeat (2 s);
the latest one counts.

A send waits until both clocks have passed its moment: its own (never early by
the host's clock) and that lower bound (never early by the store's). A host whose
clock is behind the store's sends by its own clock, as before: late by its lag,
never early. Pure: no I/O, time comes in as numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClockSample:
    store_ms: int  # the store's clock, read during the round trip
    answered_ms: int  # this host's clock when the answer came
    round_trip_ms: int


class SkewGuard:
    """How far this host's clock may be ahead of the store's, learnt from round trips."""

    def __init__(self) -> None:
        self._sample: ClockSample | None = None

    def observe(self, sent_ms: int, answered_ms: int, store_ms: int) -> None:
        """A round trip sent at local `sent_ms`, answered at local `answered_ms`,
        during which the store's clock read `store_ms`."""
        self._sample = ClockSample(store_ms, answered_ms, max(0, answered_ms - sent_ms))

    @property
    def sample(self) -> ClockSample | None:
        return self._sample

    def lead_ms(self) -> int:
        """How much later than its moment (by this host's clock) a send must wait so
        that the store's clock has surely passed it too; 0 when this host's clock is
        not ahead, or nothing is known yet. The latest sample stands however old:
        while the store does not answer, holding on to a lead errs late, not early."""
        sample = self._sample
        return 0 if sample is None else max(0, sample.answered_ms - sample.store_ms)

    def send_clock_ms(self, now_ms: int) -> int:
        """The clock sends are held on: the earlier of this host's and the store's (as
        far as it can be known to have moved)."""
        return now_ms - self.lead_ms()
