"""The whole service under a seeded schedule, faults and workload (tests/sim/README.md).

CI runs the seeds of CI_SEEDS, and of STEPS_AND_BURSTS_SEEDS with host clock steps,
rolling restarts and a bursty biz type; `TIMER_SIM_SEEDS=N` runs N more (from 1000 on)
in both modes, `TIMER_SIM_SEED=s` replays seed s alone in both. A failure prints its
seed and the trace of the first job that broke a promise.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.checker import Checker
from tests.sim.simulation import Options, Outcome, simulate

CI_SEEDS = tuple(range(1, 21))
# With host clock steps, rolling restarts and the bursty biz type (Options below).
STEPS_AND_BURSTS_SEEDS = tuple(range(21, 24))
MEMORY_SEEDS = tuple(range(1, 6))
EXTRA_FROM = 1000


def chosen_seeds(ci_seeds: tuple[int, ...] = CI_SEEDS) -> tuple[int, ...]:
    one = os.environ.get("TIMER_SIM_SEED")
    if one is not None:
        return (int(one),)
    more = int(os.environ.get("TIMER_SIM_SEEDS", "0"))
    return ci_seeds + tuple(range(EXTRA_FROM, EXTRA_FROM + more))


def holds(outcome: Outcome) -> None:
    assert not outcome.violations, outcome.report()


@pytest.mark.parametrize("seed", chosen_seeds())
def test_every_promise_holds_over_mongo_with_faults(seed: int) -> None:
    holds(simulate(seed))


@pytest.mark.parametrize("seed", chosen_seeds(STEPS_AND_BURSTS_SEEDS))
def test_every_promise_holds_with_clock_steps_and_rolling_restarts(seed: int) -> None:
    """Host wall clocks stepped forward and back (issue 30, break 6), and brokers
    restarted one after the other while a biz type whose bucket takes 6 s to refill
    is spent whole (break 3)."""
    holds(simulate(seed, Options(clock_steps=True, bursts=True)))


@pytest.mark.parametrize("seed", MEMORY_SEEDS)
def test_every_promise_holds_over_the_memory_store(seed: int) -> None:
    """The cheaper mode: the in-memory store's calls are atomic; processes still crash,
    freeze and lose their queue connection."""
    holds(simulate(seed, Options(mongo=False)))


def test_a_seed_replays_byte_for_byte() -> None:
    first, again = simulate(7), simulate(7)
    assert first.history.faults, "a run with no fault checks little"
    assert len(first.history.callbacks) > 20, len(first.history.callbacks)
    assert first.history.lines() == again.history.lines()


def test_the_checker_sees_a_callback_before_its_due_moment() -> None:
    """The checker is not blind: the same run, with the endpoint's log doctored so that
    one callback went out 1 ms before its job's due moment, is a violation."""
    outcome = simulate(3, Options(faults_every_s=0))
    assert not outcome.violations, outcome.report()
    writes = Checker(outcome.history, {}).writes
    # One created well before its due moment, and never rescheduled.
    doctored = next(
        cb
        for cb in outcome.history.callbacks
        if len(writes[cb.identity]) == 1
        and writes[cb.identity][0].ended_ms < writes[cb.identity][0].due_at - 1
    )
    doctored.sent_ms = writes[doctored.identity][0].due_at - 1
    found = Checker(outcome.history, {}).never_early()
    assert [(v.promise, v.identity) for v in found] == [("never early", doctored.identity)], found


def test_a_host_clock_step_forward_never_makes_a_callback_early() -> None:
    """Issue 30, break 6: the skew guard (broker/skew.py) kept the smallest of the last
    host-lead bounds, valid only while the host's wall clock does not step. Seed 8 with
    host clock steps: broker-1's clock stepped +2443 ms at 6.1 s, then callbacks went out
    up to ~1.4 s before their due moment (`never early`). The guard now bounds the
    store's clock on the monotonic clock, which no step moves."""
    holds(simulate(8, Options(clock_steps=True)))


@pytest.mark.known_bug
def test_a_handover_under_a_backlog_sends_no_job_twice() -> None:
    """Seed 1023 (found among 60 extra seeds): a second callback with no death between.
    A herd of orders jobs (rate 4/s) is held by broker-1#5, which crashes at 12.9 s (16
    messages back to the queue; broker-2#6 takes orders); broker-1#7 starts at 18.7 s
    and broker-2#6 hands orders over at 19.0 s (18 messages back: more than it was
    given, so a job's message was published again meanwhile). broker-1#7 then calls
    orders/j31 back twice, attempt 1 both times, 200 at 20.25 s and again at 22.75 s;
    the job's history records one attempt. The new owner's mark retakes the job for the
    stale copy as for the live one: issue 30's break 4 mechanism (a handover whose
    taker's `start_sending(retake=True)` takes the mark over), reached here through a
    republished copy rather than slow outcome writes; not triaged further yet."""
    holds(simulate(1023))


def test_a_reschedule_answered_503_leaves_no_job_behind_for_long() -> None:
    """Seed 1091 (found among 100 more seeds, on the layout that moved jobs): at least
    once, within the settle bound. coupons/j21, due at 16.1 s, got a reschedule to
    17.9 s answered 503 at 14.9 s, inside a window of store command faults (errors,
    lost replies, delays); 100 s after the faults ended it was still pending, overdue,
    never called back: a half-applied move between buckets that the overdue sweep
    found only a minute later. Jobs no longer move (a reschedule is one update of the
    job in its home bucket, then the entry's bump), and the seed holds: kept as a
    regression seed of that layout change."""
    holds(simulate(1091))


def test_a_stopped_brokers_successor_spends_no_second_burst() -> None:
    """Issue 30, break 3 (seed 1018 with bursts, found among 19 seeds: 1000-1018): alerts
    (rate 1/s, burst 6) were sent by broker-1#9, 3 at 24.18 s and 5 at 26.28 s; it was
    stopped at 28.88 s, holding nothing, and broker-2#10 took alerts over with a full
    bucket: 5 at once at 30.81 s, 14 callbacks in 6,632 ms against 6 + 6.6. A lane now
    starts from the bucket as its last taker left it (broker/lane.py)."""
    holds(simulate(1018, Options(bursts=True)))


@pytest.mark.known_bug
def test_a_retried_job_is_claimed_again_after_clock_steps_and_restarts() -> None:
    """Seed 1157 with clock steps and bursts (found among 158 seeds, 1000-1157, in that
    mode): orders/j13's first attempt was answered 500 at 6.73 s and its retry stored
    (pending, attempts 1, next_attempt_at set), then 138 s later it was still pending,
    never claimed again, nor found by the overdue sweep (`at least once`). daemon-1's
    clock had been stepped -1321 ms at 6.55 s, and the brokers were stopped and
    restarted four times from 10.3 s. Not triaged yet (the daemon's claim and sweep)."""
    holds(simulate(1157, Options(clock_steps=True, bursts=True)))
