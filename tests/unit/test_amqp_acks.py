"""Acks sent together (timer_service/queue/amqp_acks.py): a `multiple=True` ack never
reaches a message whose fate is not yet decided, and every ack is sent.

The server is modelled as AMQP 0-9-1 has it: `basic.ack(N, multiple=True)` acks every
unacked message of the channel up to N; a requeue or drop settles one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiormq.exceptions import ChannelInvalidStateError
from hypothesis import given, settings
from hypothesis import strategies as st

from timer_service.queue.amqp_acks import AckWindow, ChannelAcks


class Server:
    """One channel's unacked messages, as the server sees them."""

    def __init__(self) -> None:
        self.unacked: set[int] = set()
        self.acked: set[int] = set()
        self.settled: set[int] = set()  # requeued or dropped

    def deliver(self, tag: int) -> None:
        self.unacked.add(tag)

    def ack(self, tag: int, multiple: bool = False) -> None:
        covered = {t for t in self.unacked if t <= tag} if multiple else {tag} & self.unacked
        assert covered, f"an ack of {tag} (multiple={multiple}) covered nothing"
        self.unacked -= covered
        self.acked |= covered

    def settle(self, tag: int) -> None:
        self.unacked.discard(tag)
        self.settled.add(tag)


def send(window: AckWindow, server: Server) -> None:
    every, single = window.take()
    if every is not None:
        server.ack(every, multiple=True)
    for tag in single:
        server.ack(tag)


# Each step: deliver the next message, or decide the fate of a delivered one (by its
# index among the delivered: ack or settle), or send what the window allows.
steps = st.lists(
    st.one_of(
        st.just(("deliver", 0)),
        st.tuples(st.sampled_from(["ack", "settle"]), st.integers(0, 40)),
        st.just(("send", 0)),
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_a_multiple_ack_covers_only_messages_acked_by_their_handler(
    plan: list[tuple[str, int]],
) -> None:
    window, server = AckWindow(), Server()
    delivered: list[int] = []
    acked_by_handler: set[int] = set()
    decided: set[int] = set()
    for what, index in plan:
        if what == "deliver":
            tag = len(delivered) + 1
            delivered.append(tag)
            window.delivered(tag)
            server.deliver(tag)
        elif what == "send":
            send(window, server)
            wrongly = server.acked - acked_by_handler
            assert not wrongly, f"acked {sorted(wrongly)}, whose handlers never acked them"
        elif delivered:
            tag = delivered[index % len(delivered)]
            if tag in decided:
                continue  # a fate is decided once
            decided.add(tag)
            if what == "ack":
                acked_by_handler.add(tag)
                window.ack(tag)
            else:  # the requeue or drop frame is written, then the window told
                server.settle(tag)
                window.settled(tag)
    send(window, server)
    assert server.acked == acked_by_handler, (
        f"expected exactly the handlers' acks {sorted(acked_by_handler)} sent, "
        f"the server acked {sorted(server.acked)}"
    )
    assert not server.settled & server.acked, "a requeued or dropped message was acked"


def test_a_batch_of_acks_in_order_is_one_multiple_ack() -> None:
    window = AckWindow()
    for tag in range(1, 11):
        window.delivered(tag)
    for tag in (3, 1, 2, 5, 4):
        window.ack(tag)
    assert window.take() == (5, []), "acks of 1-5 with nothing open below: one frame"
    assert window.take() == (None, []), "taken once"


def test_acks_above_an_open_message_go_one_by_one() -> None:
    """Message 2 is still held (its callback not yet sent): a `multiple` ack of 4 would
    ack it too, and it would be lost if this process died before sending it."""
    window = AckWindow()
    for tag in range(1, 6):
        window.delivered(tag)
    for tag in (1, 3, 4):
        window.ack(tag)
    assert window.take() == (None, [1, 3, 4])
    window.ack(2)
    window.ack(5)
    assert window.take() == (5, []), "once 2 is acked, nothing is open below 5"


def test_a_requeued_message_is_passed_over_once_its_frame_is_written() -> None:
    window = AckWindow()
    for tag in range(1, 5):
        window.delivered(tag)
    window.ack(1)
    window.ack(3)
    window.ack(4)
    assert window.take() == (None, [1, 3, 4]), "2's requeue not yet written: 2 is open"
    window.settled(2)
    window.ack(4)  # acked already: a second ack of one tag changes nothing
    assert window.take() == (None, [])


class FakeChannel:
    def __init__(self) -> None:
        self.frames: list[tuple[int, bool]] = []

    async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
        self.frames.append((tag, multiple))


async def test_the_acks_of_one_loop_turn_go_in_one_frame() -> None:
    channel = FakeChannel()
    acks = ChannelAcks(channel)  # type: ignore[arg-type]
    for tag in range(1, 65):
        acks.delivered(tag)
    for tag in range(1, 65):
        acks.ack(tag)
    assert channel.frames == [], "sent on the next turn, not at each ack"
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert channel.frames == [(64, True)], channel.frames


async def test_flush_sends_at_once_and_leaves_nothing_for_the_next_turn() -> None:
    channel = FakeChannel()
    acks = ChannelAcks(channel)  # type: ignore[arg-type]
    for tag in (1, 2, 3):
        acks.delivered(tag)
    acks.ack(1)
    acks.ack(3)
    await acks.flush()
    assert channel.frames == [(1, False), (3, False)], channel.frames
    for _ in range(3):
        await asyncio.sleep(0)
    assert channel.frames == [(1, False), (3, False)], "sent twice"


async def test_acks_made_while_a_frame_waits_for_room_are_sent_after_it() -> None:
    """A frame can wait for room on the connection's write queue. The acks made
    meanwhile go after it: a `multiple` ack of 3 overtaking the single ack of 2 would
    make that one an ack of an unknown tag, which closes the channel."""

    class Slow(FakeChannel):
        calls = 0

        async def basic_ack(self, tag: int, multiple: bool = False, wait: bool = True) -> None:
            self.calls += 1
            if self.calls == 1:  # the first frame waits for room; the queue then has some
                for _ in range(5):
                    await asyncio.sleep(0)
            self.frames.append((tag, multiple))

    channel = Slow()
    acks = ChannelAcks(channel)  # type: ignore[arg-type]
    for tag in range(1, 6):
        acks.delivered(tag)
    acks.ack(2)  # 1 is open: a single ack, which waits for room
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    acks.ack(1)
    acks.ack(3)
    await acks.flush()
    assert channel.frames == [(2, False), (3, True)], channel.frames


async def test_a_closed_channel_loses_the_acks_quietly() -> None:
    class Closed(FakeChannel):
        async def basic_ack(self, *args: Any, **kwargs: Any) -> None:
            raise ChannelInvalidStateError("closed")

    acks = ChannelAcks(Closed())  # type: ignore[arg-type]
    acks.delivered(1)
    acks.ack(1)
    await acks.flush()  # the server has the message back; nothing to raise
