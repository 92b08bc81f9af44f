"""The hold bound: no message stays unacked longer than RabbitMQ allows.

RabbitMQ closes a channel that holds a delivery past its ``consumer_timeout`` and
redelivers everything it held, while the lane would still hold (and send) the
old copies. So a message waiting longer than ``max_hold_ms`` (a pause, a
backlog, a slow rate limit) is handed back to the queue first, unsent, and
comes straight back as a fresh delivery. Pure bookkeeping on monotonic seconds:
the lane carries the hand-backs out.
"""

from __future__ import annotations

import math

from broker.held import Held


class HoldBound:
    def __init__(self, max_hold_ms: int | None) -> None:
        self._max_hold_s = None if max_hold_ms is None else max_hold_ms / 1000
        self._next_s = math.inf  # when the oldest waiting message is due back

    def waiting(self, item: Held) -> bool:
        """`item` waits in the hold or ready list; True when its hand-back comes first
        of all (the lane must wake up for it)."""
        if self._max_hold_s is None:
            return False
        due_s = item.received_s + self._max_hold_s
        if due_s < self._next_s:
            self._next_s = due_s
            return True
        return False

    def overdue(self, mono: float, *waiting: list[Held]) -> tuple[list[Held], float]:
        """Take out of the `waiting` lists every message held for `max_hold_ms`; those,
        and seconds until the next one is due (inf: none). What is being checked or sent
        is not in them: a check ends within its bound and puts its messages back in the
        ready list, a send ends with its outcome."""
        if self._max_hold_s is None or mono < self._next_s:
            return [], max(0.0, self._next_s - mono)
        cutoff_s = mono - self._max_hold_s
        handed: list[Held] = []
        for items in waiting:
            late = [item for item in items if item.received_s <= cutoff_s]
            if late:
                items[:] = [item for item in items if item.received_s > cutoff_s]
                handed.extend(late)
        oldest = min((item.received_s for items in waiting for item in items), default=math.inf)
        self._next_s = oldest + self._max_hold_s
        return handed, max(0.0, self._next_s - mono)
