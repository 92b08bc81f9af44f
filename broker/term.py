"""How long this broker may still send: the lease its store heartbeat gives it, counted
on its own monotonic clock, and the terms that leases make.

A heartbeat keeps a broker live in the store until the TTL after the store applied it;
once it lapses the other brokers take its biz types (broker/ownership.py) and, 2 s later,
the leader resends what it had marked (daemon/holders.py). The broker counts the same
lease from the moment it *sent* the beat, which is no later than the store applied it,
on the monotonic clock, which goes on while the process is frozen (SIGSTOP, a long
pause): when the lease has run out by this count, it has in the store too. A lane sends
and marks only while more than `SEND_MARGIN_S` of the lease is left, which covers the
way from the check to the wire.

A term is one unbroken run of leases. Once a lease lapses the term is over for good: a
heartbeat that lands afterwards starts a new term, and the lanes of the old one never
send again (the broker lets go of them, cancelling their consumers, so that RabbitMQ's
single active consumer moves to the broker that owns them now). A stalled broker that
comes back therefore sends nothing it marked or held before its stall: the callbacks
of a frozen term are another broker's by then (issue 30, break 9).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from timer_service.clock import Clock

# A lane stops sending this long before its lease runs out: from the check to the
# callback on the wire (the task that sends runs a few turns later; its connection may
# need opening). The leader waits 2 s more before it resends (daemon/holders.py).
SEND_MARGIN_S = 1.0


class Term:
    """One unbroken run of heartbeat leases."""

    def __init__(self, number: int, clock: Clock) -> None:
        self.number = number
        self._clock = clock
        self._until_s = -math.inf  # no lease yet: a term starts at its first beat
        self._leased = False
        self.over = False

    def valid(self) -> bool:
        """Lanes of this term may mark and send now."""
        return not self.over and self._clock.monotonic_s() < self._until_s - SEND_MARGIN_S

    def lapsed(self) -> bool:
        """Its lease ran out (not just never given yet)."""
        return self.over or (self._leased and self._clock.monotonic_s() >= self._until_s)

    def left_s(self) -> float:
        return self._until_s - self._clock.monotonic_s()

    def _renew(self, until_s: float) -> None:
        self._leased = True
        self._until_s = max(self._until_s, until_s)


class Lease:
    """The broker's terms: renewed by each heartbeat that lands."""

    def __init__(self, clock: Clock, ttl_s: float) -> None:
        self._clock = clock
        self._ttl_s = ttl_s
        self.term = Term(1, clock)

    def landed(self, sent_at_s: float) -> bool:
        """A heartbeat sent at `sent_at_s` (monotonic) was applied. True when it
        starts a new term (the last one had lapsed)."""
        fresh = self.term.lapsed()
        if fresh:
            self.term.over = True
            self.term = Term(self.term.number + 1, self._clock)
        self.term._renew(sent_at_s + self._ttl_s)
        return fresh

    def end(self) -> None:
        """The lease ran out: the term is over (a heartbeat starts the next)."""
        self.term.over = True


class Stream:
    """A lane's hold on its biz type's stream: the broker's term it was made in, and the
    biz type's ownership epoch its send marks carry (`brokers.own_biz_type`), taken
    before its first mark and again after a mark was refused (`StaleEpoch`)."""

    def __init__(self, term: Term, take: Callable[[], Awaitable[int]]) -> None:
        self.term = term
        self._take = take
        self._epoch: int | None = None

    async def epoch(self) -> int:
        if self._epoch is None:
            self._epoch = await self._take()
        return self._epoch

    def taken_by_another(self) -> None:
        self._epoch = None
