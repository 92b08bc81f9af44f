"""`console.recent_attempts` on both adapters carries what the stats' lateness needs: each
attempt with its job's due time and registration time (timer_service/stats.py)."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import second_of
from timer_service.store.base import Store


async def test_recent_attempts_carry_due_and_registration_times(store: Store) -> None:
    due = NOW + 5000
    await create(store, new("ahead", due_at=due), now=NOW)
    await create(store, new("past-due", due_at=due), now=due + 3_600_000)
    claimed = await claim_second(store, second_of(due))
    outcomes = [
        Outcome(
            SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket),
            OutcomeKind.DELIVERED,
            attempt(1, at=due + 7),
            None,
        )
        for c in claimed
    ]  # fmt: skip
    await store.outcomes.record_outcomes(outcomes, due + 10)

    recent = await store.console.recent_attempts(due, "orders")

    got = sorted((r.due_at, r.created_at, r.attempt.at) for r in recent)
    want = [(due, NOW, due + 7), (due, due + 3_600_000, due + 7)]
    assert got == want, f"expected {want}, got {got}"
