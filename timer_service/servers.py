"""The console's servers view (docs/console.md, "Servers"): the daemons with the
partitions they lease, the brokers with their biz types and heartbeats, and the canary,
from what the store keeps (leases, broker beats, canary attempts). Pure.

A broker's biz types are names a token may not be entitled to see: each broker shows
only the biz types the caller's grant covers, and never the service's own (the
canary's, which has its own section)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from timer_service.dispatch import BrokerBeat, LeaseState
from timer_service.model import is_reserved
from timer_service.partitions import DAEMON_LEASE_PREFIX


@dataclass(frozen=True, slots=True)
class CanaryState:
    """`interval_ms` 0: the canary is off. `last_success_at`: epoch ms, None if none seen
    (in the store within `lookback_ms`, or by this process ever)."""

    interval_ms: int
    last_success_at: int | None
    lookback_ms: int = 0


def partition_of(lease_name: str) -> int | None:
    suffix = lease_name.removeprefix(DAEMON_LEASE_PREFIX)
    return int(suffix) if suffix.isdigit() and suffix != lease_name else None


def daemons_view(leases: Sequence[LeaseState], partitions: int, now_ms: int) -> dict[str, Any]:
    """Each lease holder with its partitions (a lapsed lease stays under its last
    holder, marked `lapsed`), and the partitions no live lease covers."""
    holders: dict[str, list[dict[str, Any]]] = {}
    owned: set[int] = set()
    for lease in sorted(leases, key=lambda x: (partition_of(x.name) or 0, x.name)):
        partition = partition_of(lease.name)
        if partition is None:
            continue
        lapsed = lease.expires_at <= now_ms
        if not lapsed:
            owned.add(partition)
        holders.setdefault(lease.holder, []).append(
            {
                "partition": partition,
                "fence": lease.token,
                "expires_at": lease.expires_at,
                "left_ms": lease.expires_at - now_ms,
                "lapsed": lapsed,
            }
        )
    return {
        "partitions": partitions,
        "unowned": [p for p in range(partitions) if p not in owned],
        "items": [
            {"holder": holder, "live": any(not p["lapsed"] for p in held), "partitions": held}
            for holder, held in sorted(holders.items())
        ],
    }


def brokers_view(
    beats: Sequence[BrokerBeat], covers: Callable[[str], bool], now_ms: int
) -> list[dict[str, Any]]:
    """Each broker's last beat, its biz types cut to those `covers` accepts."""

    def shown(biz_type: str) -> bool:
        return not is_reserved(biz_type) and covers(biz_type)

    items = []
    for beat in sorted(beats, key=lambda b: b.broker_id):
        left = beat.left_ms(now_ms)
        held = [h for h in beat.held if shown(h.biz_type)]
        items.append(
            {
                "broker_id": beat.broker_id,
                "expires_at": beat.expires_at,
                "left_ms": left,
                "lapsed": left <= 0,
                "consuming": sorted(b for b in beat.consuming if shown(b)),
                "held": [
                    {
                        "biz_type": h.biz_type,
                        "messages": h.messages,
                        "oldest_claimed_at": h.oldest_claimed_at,
                        "oldest_age_ms": max(0, now_ms - h.oldest_claimed_at),
                    }
                    for h in sorted(held, key=lambda h: h.biz_type)
                ],
            }
        )
    return items


def canary_view(state: CanaryState, now_ms: int) -> dict[str, Any]:
    """The canary's last arrival and its age; `alive` while that age is under three
    intervals (when the shipped alert fires); all null when the canary is off."""
    enabled = state.interval_ms > 0
    last = state.last_success_at if enabled else None
    age = None if last is None else max(0, now_ms - last)
    return {
        "enabled": enabled,
        "interval_ms": state.interval_ms,
        "last_success_at": last,
        "age_ms": age,
        "lookback_ms": state.lookback_ms if enabled else None,
        "alive": enabled and age is not None and age < 3 * state.interval_ms,
    }
