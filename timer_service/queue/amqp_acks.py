"""Acks of one AMQP channel sent together: one `multiple=True` frame where that is safe.

An ack with `multiple=True` and tag N acks every unacked message of the channel up
to N, so it may go only when every message up to N has had its fate decided: acked
by its handler (which the broker does only once the message's outcome is stored,
broker/outcomes.py), or requeued or dropped by a frame already written. `AckWindow`
is that rule, with no I/O: it knows which delivered tags are still open (no fate
yet) and which acks are waiting to be sent, and `take()` returns the one tag a
`multiple=True` ack may cover plus the acks that must go one by one (those above
a still-open message). `ChannelAcks` sends what `take()` returns, once per loop turn:
the acks a batch of outcomes makes in one go then cost one frame, not one each
(and a frame's write and drain, several loop turns, each).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from aiormq.abc import AbstractChannel
from aiormq.exceptions import ChannelInvalidStateError

log = logging.getLogger(__name__)


class AckWindow:
    """Which of one channel's delivery tags may be acked, and how."""

    def __init__(self) -> None:
        self._delivered: deque[int] = deque()  # ascending; closed tags leave from the left
        self._open: set[int] = set()  # delivered, no fate decided yet
        self._waiting: list[int] = []  # acked by their handler, not yet sent

    def delivered(self, tag: int) -> None:
        """A message came (the server gives a channel's tags in ascending order)."""
        self._delivered.append(tag)
        self._open.add(tag)

    def ack(self, tag: int) -> None:
        """Its handler acked it: sent at the next `take()`."""
        if tag in self._open:
            self._open.discard(tag)
            self._waiting.append(tag)

    def settled(self, tag: int) -> None:
        """Requeued or dropped by a frame already written: a later `multiple=True` ack
        may reach past it."""
        self._open.discard(tag)

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)

    def take(self) -> tuple[int | None, list[int]]:
        """(the tag of one `multiple=True` ack, or None; the tags to ack one by one).

        Every tag up to the first returned is acked or settled: none is still open.
        """
        while self._delivered and self._delivered[0] not in self._open:
            self._delivered.popleft()
        lowest_open = self._delivered[0] if self._delivered else None
        waiting, self._waiting = self._waiting, []
        if lowest_open is None:
            below, above = waiting, []
        else:
            below = [t for t in waiting if t < lowest_open]
            above = [t for t in waiting if t > lowest_open]
        if len(below) < 2:  # one tag needs no `multiple`
            return None, sorted(below + above)
        return max(below), sorted(above)


class ChannelAcks:
    """One channel's `AckWindow` and the frames it allows, sent once per loop turn.

    One sender at a time: a frame can wait for room on the connection's write queue,
    and a second sender's frames must not overtake it (a `multiple=True` ack written
    before a single ack of a tag it covers would make that single ack one of an
    unknown tag, which closes the channel)."""

    def __init__(self, channel: AbstractChannel) -> None:
        self.channel = channel
        self._window = AckWindow()
        self._sending: asyncio.Task[None] | None = None  # the loop holds it weakly

    def delivered(self, tag: int) -> None:
        self._window.delivered(tag)

    def settled(self, tag: int) -> None:
        self._window.settled(tag)

    def ack(self, tag: int) -> None:
        self._window.ack(tag)
        if self._sending is None:
            # A task's first step runs on the next loop turn: the acks the rest of
            # this turn makes go in the same frame.
            self._sending = asyncio.create_task(self._send_all())

    async def flush(self) -> None:
        """Send what waits now (before the channel closes: an ack that came after the
        close would be no ack, and its message would be sent again)."""
        if self._sending is None and self._window.waiting:
            self._sending = asyncio.create_task(self._send_all())
        if self._sending is not None:
            await asyncio.shield(self._sending)  # it sends until nothing waits

    async def _send_all(self) -> None:
        try:
            while self._window.waiting:
                await self._send_taken()
        finally:
            self._sending = None

    async def _send_taken(self) -> None:
        every, single = self._window.take()
        try:
            # wait=False: the frames are queued on the connection in order (after any
            # requeue or drop written before), without waiting for each one's drain.
            if every is not None:
                await self.channel.basic_ack(every, multiple=True, wait=False)
            for tag in single:
                await self.channel.basic_ack(tag, wait=False)
        except ChannelInvalidStateError:
            pass  # the channel is gone: the server has taken its unacked messages back
        except Exception as exc:  # a lost ack is redelivered, then acked unsent
            log.warning("could not send acks", extra={"error": repr(exc)})
