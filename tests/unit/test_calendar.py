"""The load calendar's pure rules: what a write does to the counts, a query's steps,
and where flexible jobs go."""

from __future__ import annotations

from collections import Counter

import pytest

from timer_service.calendar import calendar_query, pending_moves, per_step, place
from timer_service.errors import InvalidInput
from timer_service.jobs import claimed
from timer_service.model import Job, JobState
from timer_service.queue.base import decode, encode

T = 1_767_225_600_000
S = T // 1000


def job(state: JobState = JobState.PENDING, at: int | None = T, biz: str = "orders") -> Job:
    return Job(biz, "j", T, "null", state, 0, at, T, T)


def test_moves_follow_the_pending_job() -> None:
    assert pending_moves(None, job()) == Counter({(S, "orders"): 1})
    assert pending_moves(job(), job(JobState.DISPATCHED)) == Counter({(S, "orders"): -1})
    moved = pending_moves(job(), job(at=T + 5000))
    assert moved == Counter({(S, "orders"): -1, (S + 5, "orders"): 1})
    assert pending_moves(job(), job(at=T + 999)) == Counter()  # the same second
    assert pending_moves(None, job(biz="_canary")) == Counter()  # nobody's load


def test_steps_hold_whole_seconds() -> None:
    query = calendar_query(T + 300, T + 5001, 2000)
    assert (query.from_ms, query.to_ms, query.steps) == (T, T + 6000, 3)
    assert per_step(query, {S - 1: 9, S: 1, S + 2: 2, S + 5: 3, S + 6: 9}) == [1, 2, 3]
    for bad in [(T, T + 1000, 1500), (T, T, 1000), (T, T + 2001 * 1000, 1000)]:
        with pytest.raises(InvalidInput):
            calendar_query(*bad)


def test_the_same_state_and_job_give_the_same_moment() -> None:
    load = {S + 1: 3}
    windows = [(f"orders/{i}", T, 4000) for i in range(7)]
    assert place(windows, load) == place(windows, dict(load))
    assert T + 1000 not in place(windows[:4], load)  # the busy second is left alone


def test_a_batch_fills_a_gap_over_rounds_not_at_once() -> None:
    # Everything full but one second: a batch gives the gap at most 1.5x its share,
    # so that batches deciding together on this state do not all pile into it.
    load = {S + k: 100 for k in range(61) if k != 30}
    windows = [(f"orders/{i}", T, 60_000) for i in range(610)]
    fires = Counter(place(windows, load))
    assert fires[T + 30_000] == 15, fires[T + 30_000]
    assert max(n for at, n in fires.items() if at != T + 30_000) <= 10


def test_a_message_carries_the_job_s_window() -> None:
    flexible = job().evolve(window_ms=9000, fire_at=T + 4000, next_attempt_at=T + 4000)
    flexible = flexible.evolve(claim="c1", state=JobState.DISPATCHED)
    carried = decode(encode(claimed(flexible, S + 4, carry=True))).job
    assert carried is not None and (carried.window_ms, carried.fire_at) == (9000, T + 4000)
    plain = decode(encode(claimed(job().evolve(claim="c1"), S, carry=True))).job
    assert plain is not None and (plain.window_ms, plain.fire_at, plain.fires_at) == (0, None, T)
