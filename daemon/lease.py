"""A daemon's term of leadership, as the scanner, reconciler and sweeper see it.

The leases themselves (one per partition, renewed every ttl/3, given up the moment
they are in doubt) are kept by daemon/partition_lease.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

LEASE_NAME = "daemon-p0"


@dataclass(frozen=True, slots=True)
class Term:
    """One uninterrupted stretch of leadership. A new term means: start from scratch."""

    number: int  # local count of terms, increases on every gain
    fence: int  # the store's fencing token, passed to every state write
    partitions: frozenset[int] = frozenset({0})  # what the scanner works in this term


def narrowed(old: Term | None, new: Term | None) -> bool:
    """`new` only hands partitions of `old` back, under the same fence: no takeover,
    nothing to start again (daemon/partition_lease.py)."""
    return (
        old is not None
        and new is not None
        and new.fence == old.fence
        and new.partitions < old.partitions
    )


class Lead(Protocol):
    """What the scanner, reconciler and sweeper ask of a lease keeper."""

    def current(self) -> Term | None: ...
