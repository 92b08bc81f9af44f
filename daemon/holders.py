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

Judged on the daemon's clock against an expiry the broker set on its own: the
hosts' clocks must agree within `DEAD_AFTER_MS` (see docs/architecture.md, "One
clock").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from timer_service.dispatch import BrokerBeat

# Past a heartbeat's expiry (itself 3 beats after it was written): a slow store
# write or a loaded host must not make a live broker look dead.
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
    live: set[str] = set()
    dead: set[str] = set()
    oldest: dict[str, int] = {}
    deaths: list[int] = []
    for beat in beats:
        dies_at = beat.expires_at + DEAD_AFTER_MS
        if dies_at < now_ms:
            dead.add(beat.broker_id)
            continue
        live.add(beat.broker_id)
        deaths.append(dies_at + 1)
        for held in beat.held:
            if held.messages > 0:
                known = oldest.get(held.biz_type)
                if known is None or held.oldest_claimed_at < known:
                    oldest[held.biz_type] = held.oldest_claimed_at
    return Holders(frozenset(live), frozenset(dead), oldest, min(deaths, default=None))
