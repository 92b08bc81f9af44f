"""Which broker consumes which biz type: rendezvous hashing over the live brokers.

Every broker reads the same heartbeats (the `brokers` collection) and computes the
same owner for each biz type: the live broker with the highest hash of
(biz type, broker id). A broker joining takes over about 1/N of the biz types and
nothing moves between the others; a broker leaving hands its own to the rest,
spread the same way.

Ownership only decides who subscribes. That a biz type has one sender at a time
is RabbitMQ's single-active-consumer's doing, as before: while two brokers both
subscribe (the new owner already, the old one still draining) the old one stays
the active consumer. So a handover is make-before-break: the new owner subscribes
and says so in its heartbeat; only then does the old owner stop sending, finish
its callbacks in flight and cancel, which hands its held messages to the new
owner. A biz type is never left without a subscriber because two brokers briefly
disagree about who is alive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass


def owner(biz_type: str, brokers: Iterable[str]) -> str:
    """The broker that consumes `biz_type` among `brokers` (at least one)."""
    return max(brokers, key=lambda broker: (_weight(biz_type, broker), broker))


def _weight(biz_type: str, broker: str) -> bytes:
    return hashlib.blake2b(f"{biz_type}\0{broker}".encode(), digest_size=8).digest()


@dataclass(frozen=True, slots=True)
class Plan:
    start: frozenset[str]  # subscribe to these now
    stop: frozenset[str]  # drain and cancel these: their owner consumes them already


def plan(
    me: str,
    biz_types: Collection[str],
    consuming: Collection[str],
    live: Mapping[str, Collection[str]],
) -> Plan:
    """What broker `me`, consuming `consuming`, should change, given the biz types and
    the live brokers with what each says it consumes (its last heartbeat).

    `me` counts as live whatever the heartbeats say: a broker whose own heartbeat
    has not landed yet still consumes what it owns."""
    brokers = set(live) | {me}
    start, stop = set(), set()
    for biz_type in biz_types:
        to = owner(biz_type, brokers)
        if to == me:
            if biz_type not in consuming:
                start.add(biz_type)
        elif biz_type in consuming and biz_type in live.get(to, ()):
            stop.add(biz_type)
    return Plan(frozenset(start), frozenset(stop))
