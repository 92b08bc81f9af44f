"""Biz types spread over the live brokers, handed over make-before-break."""

from __future__ import annotations

from collections import Counter

from broker.ownership import owner, plan

BIZ = [f"biz{i}" for i in range(300)]


def test_every_broker_computes_the_same_spread_and_it_is_even() -> None:
    brokers = ["b-a", "b-b", "b-c"]
    owners = {biz: owner(biz, brokers) for biz in BIZ}
    assert owners == {biz: owner(biz, list(reversed(brokers))) for biz in BIZ}  # order-free
    counts = Counter(owners.values())
    assert set(counts) == set(brokers)
    assert min(counts.values()) >= 70, counts  # 100 each on average


def test_a_newcomer_takes_only_its_share_and_nothing_moves_between_the_others() -> None:
    before = {biz: owner(biz, ["b-a", "b-b"]) for biz in BIZ}
    after = {biz: owner(biz, ["b-a", "b-b", "b-c"]) for biz in BIZ}
    moved = {biz for biz in BIZ if before[biz] != after[biz]}
    assert all(after[biz] == "b-c" for biz in moved), "only moves to the newcomer"
    assert 60 <= len(moved) <= 140, len(moved)  # about a third


def test_a_broker_alone_consumes_everything() -> None:
    got = plan("b-a", BIZ[:5], consuming=(), live={})
    assert got.start == set(BIZ[:5]) and got.stop == set()


def test_a_handover_waits_for_the_new_owner_to_subscribe() -> None:
    biz = next(b for b in BIZ if owner(b, ["b-a", "b-b"]) == "b-b")
    # b-a consumed it alone; b-b is now live but has not subscribed yet: keep it.
    waiting = plan("b-a", [biz], consuming={biz}, live={"b-a": {biz}, "b-b": ()})
    assert waiting.stop == set() and waiting.start == set()
    # b-b's side: it owns the biz type and subscribes beside b-a.
    newcomer = plan("b-b", [biz], consuming=(), live={"b-a": {biz}, "b-b": ()})
    assert newcomer.start == {biz}
    # b-b's heartbeat says it consumes it: now b-a lets go.
    handover = plan("b-a", [biz], consuming={biz}, live={"b-a": {biz}, "b-b": {biz}})
    assert handover.stop == {biz}


def test_a_dead_broker_s_biz_types_are_taken_by_the_living() -> None:
    mine = [b for b in BIZ if owner(b, ["b-a", "b-b"]) == "b-a"]
    # b-b's heartbeat expired: it is not in `live`, so b-a owns everything.
    got = plan("b-a", BIZ, consuming=set(mine), live={"b-a": set(mine)})
    assert got.start == set(BIZ) - set(mine) and got.stop == set()


def test_a_broker_not_yet_in_the_heartbeats_still_counts_itself() -> None:
    biz = next(b for b in BIZ if owner(b, ["b-a", "b-b"]) == "b-b")
    got = plan("b-b", [biz], consuming=(), live={"b-a": {biz}})
    assert got.start == {biz}
