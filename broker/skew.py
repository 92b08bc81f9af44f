"""The skew guard: a callback waits for the store's clock as well as this host's.

Due times are compared on the service's side, and the store's clock is the one
every process shares. A broker host whose wall clock runs fast, or is stepped
forward, would otherwise send early by exactly its lead. The broker learns the
store's clock from a round trip it makes anyway (its heartbeat, which reads the
store's time back with the write): the store's time `store_ms` was read somewhere
between sending the call and its answer (local monotonic `answered_s`), so at
`answered_s` the store's clock showed at least `store_ms`, and from then on at least
`store_ms` plus the monotonic time elapsed since. A lower bound that the round
trip's own length only makes looser, never too high.

The bound is kept on the monotonic clock, not on this host's wall clock: no step
of the wall clock (NTP, an operator, a VM resumed) moves it (issue 30, break 6: a
bound kept as the host's lead over the store, on its wall clock, let a 2 s step
forward send callbacks 1.5 s early until the older samples were gone).

A send waits until both clocks have passed its moment: this host's wall clock
(never early by it) and the store's lower bound (never early by the store's). A
host whose wall clock is behind the store's sends by its own clock: late by its
lag, never early.

Each heartbeat (every 2 s) gives one bound; the highest of the last `SAMPLES_KEPT`
counts, so one slow round trip does not delay every callback by its length, and
an old sample cannot carry the drift between the monotonic clock and the store's
for long (tens of ppm: well under a millisecond over `SAMPLES_KEPT` beats).
Samples stay however old: a store that does not answer leaves the last bound in
force, moving on with the monotonic clock. Pure: no I/O, time comes in as numbers.
"""

from __future__ import annotations

from collections import deque

SAMPLES_KEPT = 5


class SkewGuard:
    """A lower bound of the store's clock, on this host's monotonic clock."""

    def __init__(self) -> None:
        # Each sample: the store's clock minus the monotonic clock (ms) at its answer.
        self._offsets_ms: deque[float] = deque(maxlen=SAMPLES_KEPT)

    def observe(self, answered_s: float, store_ms: int) -> None:
        """A round trip answered at monotonic `answered_s`, during which the store's
        clock read `store_ms`."""
        self._offsets_ms.append(store_ms - answered_s * 1000)

    def store_floor_ms(self, mono_s: float) -> int | None:
        """The store's clock at monotonic `mono_s` is at least this; None while nothing
        is known."""
        if not self._offsets_ms:
            return None
        return int(max(self._offsets_ms) + mono_s * 1000)

    def send_clock_ms(self, now_ms: int, mono_s: float) -> int:
        """The clock sends are held on and stamped by: the earlier of this host's wall
        clock (`now_ms`) and the store's, as far as it can be known to have moved."""
        floor = self.store_floor_ms(mono_s)
        return now_ms if floor is None else min(now_ms, floor)

    def lead_ms(self, now_ms: int, mono_s: float) -> int:
        """How far this host's wall clock is ahead of the store's lower bound: how much
        later than its moment (by this host's clock) a send must wait; 0 when it is not
        ahead, or nothing is known yet."""
        return now_ms - self.send_clock_ms(now_ms, mono_s)
