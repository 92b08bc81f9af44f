"""Who holds which dispatched jobs, judged from the brokers' heartbeats. Pure.

Every broker writes a heartbeat every 2 s (broker/app.py): alive until
`expires_at`, and per biz type how many messages it holds and the oldest
`claimed_at` among them. A queue hands a biz type's messages out in the order
they were published, and the daemon publishes in claim order, so a broker that
holds messages of a biz type claimed at T or later has already taken (and
settled) every message of that biz type claimed before T. Hence:

- a job claimed before the oldest claim any live broker holds of its biz type is
  held by no live broker: if it is still dispatched long after its claim, its
  message is lost (or a copy redelivered out of order, which a reclaim turns
  stale), whatever else that broker holds;
- a job claimed at or after it may be held, or wait in the queue behind what is
  held: a backlog, a pause, a rate limit; it is left alone;
- a broker silent for `DEAD_AFTER_MS` past its heartbeat's expiry is dead: the
  callbacks it had started will not finish, and its messages are back in the
  queue (RabbitMQ) or gone with its process (the in-process queue).

Judged on the store's clock, at both ends: a beat's expiry is stamped when the
store applies it, and compared with the store's clock when the beats are read
(`BrokerBeat.read_at`). A busy store delays both alike, so it cannot make a live
broker look dead: a beat that waited 5 s in its queue is as fresh as when it
landed, and so is a read that waited. (Stamped on the broker's clock when sent
and judged on the daemon's when the read came back, each wait counted against the
broker: with answers 4 s slow a live broker looked dead, and the leader would have
resent its callbacks, a second callback with no process dead;
tests/unit/test_broker_liveness.py.) The hosts' clocks need not agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from timer_service.dispatch import BrokerBeat

# Past a heartbeat's expiry (itself 3 beats after it was applied): a loaded broker
# host, late with a beat or two, must not look dead.
DEAD_AFTER_MS = 2_000


@dataclass(frozen=True, slots=True)
class Holders:
    live: frozenset[str]
    dead: frozenset[str]
    # Per biz type held by a live broker: the oldest claimed_at any of them holds.
    oldest_held: dict[str, int]
    # When the next live broker turns dead if it beats no more (None: none is live).
    next_death_ms: int | None


def judge(beats: Iterable[BrokerBeat], now_ms: int) -> Holders:
    """`now_ms`: the daemon's clock, for `next_death_ms` (and to judge by where the
    store keeps no clock)."""
    live: set[str] = set()
    dead: set[str] = set()
    oldest: dict[str, int] = {}
    deaths: list[int] = []
    for beat in beats:
        left_ms = beat.left_ms(now_ms) + DEAD_AFTER_MS
        if left_ms < 0:
            dead.add(beat.broker_id)
            continue
        live.add(beat.broker_id)
        deaths.append(now_ms + left_ms + 1)
        for held in beat.held:
            if held.messages > 0:
                known = oldest.get(held.biz_type)
                if known is None or held.oldest_claimed_at < known:
                    oldest[held.biz_type] = held.oldest_claimed_at
    return Holders(frozenset(live), frozenset(dead), oldest, min(deaths, default=None))
