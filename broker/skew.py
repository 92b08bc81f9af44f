"""The skew guard: a callback waits for the store's clock as well as this host's.

Due times are compared on the service's side, and the store's clock is the one
every process shares. A broker host whose clock runs fast would otherwise send
early by exactly its lead. The broker learns the store's clock from a round trip
it makes anyway (its heartbeat, which reads the store's time back with the
write): the store's time `store_ms` was read somewhere between sending the call
and its answer (local `answered_ms`), so at `answered_ms` the store's clock
showed at least `store_ms`. So this host's lead over the store is at most
`answered_ms - store_ms`: a bound that the round trip's own length only makes
looser, never too small.

A send waits until both clocks have passed its moment: its own (never early by
the host's clock) and the store's lower bound, i.e. its own clock minus the
lead (never early by the store's). A host whose clock is behind the store's
sends by its own clock, as before: late by its lag, never early.

Each heartbeat (every 2 s) gives one bound; the tightest of the last
`SAMPLES_KEPT` counts, so one slow round trip does not delay every callback by
its length. The cost: should this host's clock be stepped forward (ahead of the
store) by Δ, sends may be up to Δ early until the older samples are gone, about
`SAMPLES_KEPT` heartbeats. Samples stay however old: a store that does not
answer leaves the last lead in force (late, not early). Pure: no I/O, time
comes in as numbers.
"""

from __future__ import annotations

from collections import deque

SAMPLES_KEPT = 5


class SkewGuard:
    """How far this host's clock may be ahead of the store's, learnt from round trips."""

    def __init__(self) -> None:
        self._leads_ms: deque[int] = deque(maxlen=SAMPLES_KEPT)

    def observe(self, answered_ms: int, store_ms: int) -> None:
        """A round trip answered at local `answered_ms`, during which the store's
        clock read `store_ms`."""
        self._leads_ms.append(answered_ms - store_ms)

    def lead_ms(self) -> int:
        """How much later than its moment (by this host's clock) a send must wait so
        that the store's clock has surely passed it too; 0 when this host's clock is
        not ahead, or nothing is known yet."""
        return max(0, min(self._leads_ms, default=0))

    def send_clock_ms(self, now_ms: int) -> int:
        """The clock sends are held on: the earlier of this host's and the store's (as
        far as it can be known to have moved)."""
        return now_ms - self.lead_ms()
