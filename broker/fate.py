"""A message's fate (ack, requeue or drop), decided from the facts and carried out in one place.

The deciding functions are pure. `carry_out` is the only broker code that acks,
requeues or drops a message: it settles the message together with its twins
(other messages of the same dispatch, see broker.lane), logs the fate and counts
the messages acked without being called back (`timer_messages_dropped_total`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from timer_service.metrics import Metrics
from timer_service.queue.base import Delivery

log = logging.getLogger(__name__)


class Action(Enum):
    ACK = "ack"  # done with: its outcome is stored, or there is nothing to send
    REQUEUE = "requeue"  # back to the queue: the job is still dispatched under its claim
    DROP = "drop"  # rejected for good


@dataclass(frozen=True, slots=True)
class Fate:
    action: Action
    reason: str  # for the logs
    sent: bool = False  # the first of the messages was called back (its twins were not)


OUTCOME_STORED = Fate(Action.ACK, "outcome stored", sent=True)
NOT_DISPATCHED = Fate(Action.ACK, "job no longer dispatched under this claim")
SUPERSEDED = Fate(Action.ACK, "another message carries the job's claim")
LET_GO_SENT = Fate(Action.ACK, "sent; let go of before its outcome was stored", sent=True)
CHECK_FAILED = Fate(Action.REQUEUE, "send check failed")
HELD_TOO_LONG = Fate(Action.REQUEUE, "held as long as the queue allows")
# This broker may no longer send the biz type (broker/term.py: its lease lapsed, or
# another broker took the stream's epoch): back to the queue, for whoever owns it now
# (a no-op on a channel already closed, whose messages the queue has back).
NOT_OURS = Fate(Action.REQUEUE, "stream no longer ours")


def after_check(job_found: bool, claim_matches: bool) -> Fate | None:
    """A held message's fate once the store said which jobs are still dispatched under
    their message's claim: None when it goes on to be sent.

    `job_found`: the store returned the message's job. `claim_matches`: that job's
    claim is the message's (two messages of one job can share a check, and the
    store answers by job key).
    """
    if not job_found:
        return NOT_DISPATCHED  # cancelled after publication, already done, or stale
    if not claim_matches:
        return SUPERSEDED
    return None


def check_failed() -> Fate:
    """The store could not say, within the bound: someone must try again."""
    return CHECK_FAILED


def not_ours() -> Fate:
    """Unsent: this broker lost the biz type's stream before the send."""
    return NOT_OURS


def held_too_long() -> Fate:
    """Unsent, and held as long as the queue lets a delivery stay unacked: back to the
    queue, which hands it out again at once (the job is still dispatched under its
    claim; a mark this lane made is taken over by the redelivered message)."""
    return HELD_TOO_LONG


def after_outcome() -> Fate:
    """A sent message's fate once its outcome is stored (until then it is kept: handed
    back, it would be sent again; see broker.outcomes)."""
    return OUTCOME_STORED


def let_go_sent() -> Fate:
    """A sent message whose outcome is not stored yet, at a planned let-go of its biz
    type: acked, not kept. Handed back, the next owner would send it again; its outcome
    is stored when the writer gets to it (broker.outcomes), and until then the job
    carries this broker's send mark, which the leader leaves alone while this broker
    lives and resends once it is dead (daemon/reconciler.py)."""
    return LET_GO_SENT


async def carry_out(fate: Fate, deliveries: Sequence[Delivery], metrics: Metrics) -> None:
    """Settle a message and its twins alike; a failure is logged, not raised (an
    unsettled message comes back from the queue later)."""
    job = deliveries[0].job
    if fate.action is Action.ACK:
        for _ in range(len(deliveries) - 1 if fate.sent else len(deliveries)):
            metrics.message_dropped(job.biz_type)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "message settled",
            extra={
                "biz_type": job.biz_type,
                "job_id": job.job_id,
                "fate": fate.action.value,
                "reason": fate.reason,
                "messages": len(deliveries),
            },
        )
    for delivery in deliveries:
        try:
            if fate.action is Action.ACK:
                await delivery.ack()
            elif fate.action is Action.REQUEUE:
                await delivery.requeue()
            else:
                await delivery.drop()
        except Exception as exc:  # a lost ack is redelivered, then dropped
            metrics.queue_error("settle")
            log.warning(
                "could not settle message",
                extra={
                    "biz_type": job.biz_type,
                    "job_id": job.job_id,
                    "fate": fate.action.value,
                    "error": repr(exc),
                },
            )
