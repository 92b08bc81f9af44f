"""A message a lane holds: its moment, its twins, and the order lanes keep them in."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from timer_service.dispatch import SendRef
from timer_service.model import Job
from timer_service.queue.base import Delivery


@dataclass(slots=True, eq=False)
class Held:
    not_before: int
    seq: int
    delivery: Delivery
    key: str
    # Other messages of the same dispatch (a re-publish, or a redelivery after a
    # reconnect whose original channel is gone): they share this one's fate, and
    # count as dropped when acked (only this one is called back).
    twins: list[Delivery] = field(default_factory=list)
    job: Job | None = None  # set once its send is marked in the store
    limited: bool = False
    received_s: float = 0.0  # monotonic: when the lane got it (the queue's hold clock)
    sort_key: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self.sort_key = (self.not_before, self.seq)

    @property
    def deliveries(self) -> list[Delivery]:
        return [self.delivery, *self.twins]

    @property
    def ref(self) -> SendRef:
        return self.ref_under(None)

    def ref_under(self, epoch: int | None) -> SendRef:
        """Its reference, for a send mark under this ownership epoch."""
        c = self.delivery.job
        redelivered = self.delivery.redelivered
        return SendRef(
            c.biz_type, c.job_id, c.second, c.claim, redelivered, c.due_at, c.job, c.bucket, epoch
        )

    def prune(self) -> bool:
        """Keep only messages whose channel is still open (a closed one's message is
        back in the queue, for whoever consumes it now); False when none is left."""
        live = [d for d in self.deliveries if d.live]
        if not live:
            return False
        self.delivery, self.twins = live[0], live[1:]
        return True


def sort_key(item: Held) -> tuple[int, int]:
    return item.sort_key


def insert_ordered(items: list[Held], item: Held) -> None:
    bisect.insort(items, item, key=sort_key)
