"""The job state machine alone (timer_service/jobs.py): examples and properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from timer_service import jobs as machine
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.errors import CallbackInFlight, Conflict
from timer_service.jobs import Change, CreateStatus, NewJob
from timer_service.model import ACTIVE_STATES, FINAL_STATES, Attempt, Job, JobState

T0 = 1_767_225_600_000


def fresh(due_at: int = T0 + 10_000, payload: str = '{"a":1}') -> Job:
    return machine.new_job(NewJob("orders", "o1", due_at, payload), T0)


def applied(job: Job, change: Change | None) -> Job:
    assert change is not None
    assert change.guard.holds(job), f"guard {change.guard} does not hold for {job.state}"
    return change.apply(job)


def outcome(job: Job, kind: OutcomeKind, at: int, next_at: int | None = None) -> Outcome:
    assert job.claim is not None
    ref = SendRef(job.biz_type, job.job_id, (job.next_attempt_at or 0) // 1000, job.claim)
    code = 200 if kind == OutcomeKind.DELIVERED else 503
    error = None if kind == OutcomeKind.DELIVERED else "HTTP 503"
    return Outcome(ref, kind, Attempt(job.attempts + 1, at, code, error, 5), next_at)


# --------------------------------------------------------------------------- examples


def test_a_new_job_waits_for_its_due_time() -> None:
    job = fresh()
    assert job.state == JobState.PENDING and job.next_attempt_at == job.due_at
    assert job.attempts == 0 and job.created_at == job.updated_at == T0


def test_a_repeated_create_matches_on_due_time_and_payload_value() -> None:
    job = fresh(payload='{"a": 1, "b": 2}')
    same = NewJob("orders", "o1", job.due_at, '{"b":2,"a":1}')
    assert machine.repeat_status(job, same) == CreateStatus.EXISTS
    later = NewJob("orders", "o1", job.due_at + 1, '{"b":2,"a":1}')
    assert machine.repeat_status(job, later) == CreateStatus.CONFLICT
    by_delay = NewJob("orders", "o1", job.due_at + 1, '{"a":1,"b":2}', compare_due=False)
    assert machine.repeat_status(job, by_delay) == CreateStatus.EXISTS
    print_ = machine.payload_fingerprint(job.payload_json)
    assert machine.repeat_status_by_fingerprint(job.due_at, print_, (), same) == CreateStatus.EXISTS


def test_a_repeated_create_compares_labels_like_the_payload() -> None:
    job = machine.new_job(NewJob("orders", "o1", T0, "1", labels=(("a", "1"), ("b", "2"))), T0)
    for labels, expected in (
        ((("a", "1"), ("b", "2")), CreateStatus.EXISTS),
        ((("a", "1"),), CreateStatus.CONFLICT),
        ((), CreateStatus.CONFLICT),
        ((("a", "1"), ("b", "3")), CreateStatus.CONFLICT),
    ):
        again = NewJob("orders", "o1", T0, "1", labels=labels)
        got = machine.repeat_status(job, again)
        assert got == expected, f"labels {labels}: expected {expected}, got {got}"
        by_print = machine.repeat_status_by_fingerprint(
            T0, machine.payload_fingerprint("1"), job.labels, again
        )
        assert by_print == expected, f"{labels}: expected {expected}, got {by_print}"


def test_cancel_from_each_state() -> None:
    job = fresh()
    cancelled = applied(job, machine.cancel(job, T0 + 1))
    assert cancelled.state == JobState.CANCELLED and cancelled.next_attempt_at is None
    assert machine.cancel(cancelled, T0 + 2) is None, "a second cancel changes nothing"
    dispatched = applied(job, machine.claim("c1", 1, T0))
    assert applied(dispatched, machine.cancel(dispatched, T0 + 1)).claim is None
    delivered = applied(
        dispatched, machine.outcome(outcome(dispatched, OutcomeKind.DELIVERED, T0), T0)
    )
    with pytest.raises(Conflict, match="delivered"):
        machine.cancel(delivered, T0)


def test_a_retry_is_a_new_timer_and_keeps_the_attempt() -> None:
    job = applied(fresh(), machine.claim("c1", 1, T0))
    change = machine.outcome(outcome(job, OutcomeKind.RETRY, T0 + 10_000, T0 + 12_000), T0 + 10_001)
    retried = applied(job, change)
    assert retried.state == JobState.PENDING and retried.next_attempt_at == T0 + 12_000
    assert change.next_second == (T0 + 12_000) // 1000
    assert retried.attempts == 1 and retried.last_error == "HTTP 503" and retried.claim is None


def test_an_outcome_for_another_claim_changes_nothing() -> None:
    job = applied(fresh(), machine.claim("c1", 1, T0))
    stale = outcome(job, OutcomeKind.DEAD, T0)
    reclaimed = applied(job, machine.reclaim("c1", "c2", 1, T0 + 5))
    assert not machine.outcome(stale, T0).guard.holds(reclaimed)


def test_an_outcome_after_a_cancel_is_recorded_once_per_attempt() -> None:
    job = applied(fresh(), machine.claim("c1", 1, T0))
    failed = outcome(job, OutcomeKind.RETRY, T0 + 10_000, T0 + 12_000)
    cancelled = applied(job, machine.cancel(job, T0 + 5))
    assert not machine.outcome(failed, T0 + 10_001).guard.holds(cancelled)

    change = machine.outcome_after_cancel(failed, T0 + 10_001)
    recorded = applied(cancelled, change)

    assert recorded.state == JobState.CANCELLED and recorded.next_attempt_at is None
    assert (recorded.attempts, recorded.last_error) == (1, "HTTP 503"), recorded
    assert not change.guard.holds(recorded), "a retried write would record the attempt twice"
    again = machine.outcome_after_cancel(failed, T0 + 10_500)
    assert not again.guard.holds(recorded), "the same attempt, written later, is recorded"
    next_attempt = outcome(job, OutcomeKind.DEAD, T0 + 20_000)
    assert machine.outcome_after_cancel(next_attempt, T0 + 20_001).guard.holds(recorded)
    assert not machine.outcome_after_cancel(failed, T0).guard.holds(job), "not cancelled"


def test_replay_gives_a_fresh_budget() -> None:
    job = applied(fresh(), machine.claim("c1", 1, T0))
    dead = applied(job, machine.outcome(outcome(job, OutcomeKind.DEAD, T0), T0))
    assert (
        dead.state == JobState.DEAD
        and machine.outcome(outcome(job, OutcomeKind.DEAD, T0), T0).finishes
    )
    replayed = applied(dead, machine.replay(dead, T0 + 100))
    assert replayed.state == JobState.PENDING and replayed.next_attempt_at == T0 + 100
    assert replayed.budget_base == 1 and replayed.attempts == 1
    assert machine.replay(replayed, T0 + 200) is None, "a retried replay is no change"
    claimed = applied(replayed, machine.claim("c2", 1, T0 + 300))
    assert machine.replay(claimed, T0 + 400) is None, "its first attempt has not ended"
    retried = outcome(claimed, OutcomeKind.RETRY, T0 + 500, next_at=T0 + 60_000)
    pending_again = applied(claimed, machine.outcome(retried, T0 + 500))
    with pytest.raises(Conflict, match="only a dead job"):
        machine.replay(pending_again, T0 + 600)
    with pytest.raises(Conflict, match="only a dead job"):
        machine.replay(fresh(), T0)


def test_reschedule_only_while_pending() -> None:
    job = fresh()
    moved = applied(job, machine.reschedule(job, T0 + 99_000, '"new"', T0 + 1))
    assert moved.due_at == moved.next_attempt_at == T0 + 99_000 and moved.payload == "new"
    kept = applied(job, machine.reschedule(job, T0 + 5_000, None, T0 + 1))
    assert kept.payload_json == job.payload_json
    dispatched = applied(job, machine.claim("c", 1, T0))
    with pytest.raises(Conflict, match="only a pending job"):
        machine.reschedule(dispatched, T0, None, T0)


def test_claimable_respects_time_and_fence() -> None:
    job = fresh(due_at=T0 + 1000)
    assert not machine.claimable(job, T0 + 999, 1)
    assert machine.claimable(job, T0 + 1000, 1)
    fenced = applied(job, machine.claim("c", 5, T0)).evolve(state=JobState.PENDING, claim=None)
    assert not machine.claimable(fenced, T0 + 1000, 4), "a lower fence must not claim"
    claimed = machine.claimed(applied(job, machine.claim("c", 1, T0)), (T0 + 1000) // 1000)
    assert claimed.attempt == 1 and claimed.claim == "c" and claimed.next_attempt_at == T0 + 1000


@given(st.text(min_size=0, max_size=20), st.integers(), st.booleans())
def test_fingerprint_equals_value_equality(text: str, number: int, flag: bool) -> None:
    a = json.dumps({"t": text, "n": number, "f": flag})
    b = json.dumps({"f": flag, "n": number, "t": text}, indent=2)
    assert machine.payload_fingerprint(a) == machine.payload_fingerprint(b)


# --------------------------------------------------------------------------- properties


class JobLife(RuleBasedStateMachine):
    """Any sequence of events, from the API, the daemon and the broker, in any order,
    including stale claims: the job stays consistent and final states stay final."""

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.job = fresh()
        self.fence = 1
        self.claims = 0
        self.sends = 0
        self.old_claims: list[str] = []
        self.was: JobState = self.job.state

    def _apply(self, change: Change | None) -> None:
        self.was = self.job.state
        if change is not None and change.guard.holds(self.job):
            self.job = change.apply(self.job)

    @rule(dt=st.integers(0, 5000))
    def time_passes(self, dt: int) -> None:
        self.now += dt

    @rule()
    def cancel(self) -> None:
        try:
            self._apply(machine.cancel(self.job, self.now))
        except CallbackInFlight:
            assert self.job.state == JobState.DISPATCHED and self.job.sending is not None
        except Conflict:
            assert self.job.state in (JobState.DELIVERED, JobState.DEAD)

    @rule(delay=st.integers(0, 100_000), payload=st.sampled_from([None, '"x"']))
    def reschedule(self, delay: int, payload: str | None) -> None:
        try:
            self._apply(machine.reschedule(self.job, self.now + delay, payload, self.now))
        except Conflict:
            assert self.job.state != JobState.PENDING

    @rule()
    def replay(self) -> None:
        before = self.job
        try:
            self._apply(machine.replay(self.job, self.now))
        except Conflict:
            assert self.job.state != JobState.DEAD
        if machine.replayed(before):
            assert self.job == before, "a retried replay changed the job"

    @rule(ahead=st.integers(0, 2000))
    def claim(self, ahead: int) -> None:
        if machine.claimable(self.job, self.now + ahead, self.fence):
            self.claims += 1
            if self.job.claim:
                self.old_claims.append(self.job.claim)
            self._apply(machine.claim(f"c{self.claims}", self.fence, self.now))
            assert self.job.state == JobState.DISPATCHED

    @rule()
    def takeover(self) -> None:
        self.fence += 1

    @rule()
    def reclaim(self) -> None:
        if self.job.claim is not None:
            self.claims += 1
            self.old_claims.append(self.job.claim)
            self._apply(
                machine.reclaim(
                    self.job.claim, f"c{self.claims}", self.fence, self.now, self.job.sending
                )
            )

    @rule(stale=st.booleans(), retry=st.booleans())
    def start_sending(self, stale: bool, retry: bool) -> None:
        claim = self.old_claims[-1] if stale and self.old_claims else self.job.claim
        if claim is None:
            return
        before = self.job
        self.sends += 1
        # A retry (after a lost reply) repeats the token of the mark that went through.
        token = before.sending if retry and before.sending else f"s{self.sends}"
        self._apply(machine.start_sending(claim, token, self.now))
        if claim == before.claim and before.sending == token:
            assert self.job.sending == token and self.job.claim == claim, "a retry lost its mark"
        elif claim != before.claim or before.sending is not None:
            assert self.job == before, "a stale or second start changed the job"
        try:
            machine.cancel(self.job, self.now)
        except CallbackInFlight:
            assert self.job.sending is not None
        except Conflict:
            pass

    @rule(
        kind=st.sampled_from(list(OutcomeKind)),
        stale=st.booleans(),
        backoff=st.integers(1, 60_000),
    )
    def outcome(self, kind: OutcomeKind, stale: bool, backoff: int) -> None:
        claim = self.job.claim
        if stale and self.old_claims:
            claim = self.old_claims[-1]
        if claim is None:
            return
        next_at = self.now + backoff if kind == OutcomeKind.RETRY else None
        attempt = Attempt(self.job.attempts + 1, self.now, 500, "HTTP 500", 3)
        ref = SendRef("orders", "o1", 0, claim)
        before = self.job
        result = Outcome(ref, kind, attempt, next_at)
        self._apply(machine.outcome(result, self.now))
        if claim != before.claim:
            assert self.job == before, "a stale outcome changed the job"
        if self.job.state == JobState.CANCELLED and self.job == before:
            self._apply(machine.outcome_after_cancel(result, self.now))
            assert self.job.state == JobState.CANCELLED

    @invariant()
    def consistent(self) -> None:
        job = self.job
        assert job.attempts == len(job.history)
        if job.state in FINAL_STATES:
            assert job.next_attempt_at is None and job.claim is None
        if job.state in ACTIVE_STATES:
            assert job.next_attempt_at is not None
        assert (job.state == JobState.DISPATCHED) == (job.claim is not None)
        if job.sending is not None:
            assert job.state == JobState.DISPATCHED, "only a dispatched job is being sent"
        if job.state == JobState.DELIVERED:
            assert job.delivered_at is not None and job.last_error is None

    @invariant()
    def final_states_stay(self) -> None:
        if self.was in (JobState.CANCELLED, JobState.DELIVERED):
            assert self.job.state == self.was, f"{self.was} became {self.job.state}"
        if self.was == JobState.DEAD:
            assert self.job.state in (JobState.DEAD, JobState.PENDING)


JobLife.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_job_life = JobLife.TestCase
