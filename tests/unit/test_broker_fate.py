"""A message's fate: the pure decisions, every case; and the one place that carries it out."""

from __future__ import annotations

import logging

import pytest

from broker.fate import (
    CHECK_FAILED,
    NOT_DISPATCHED,
    OUTCOME_STORED,
    SUPERSEDED,
    Action,
    Fate,
    after_check,
    after_outcome,
    carry_out,
    check_failed,
)
from timer_service.dispatch import Claimed
from timer_service.metrics import Metrics


@pytest.mark.parametrize(
    ("job_found", "claim_matches", "expected"),
    [
        (True, True, None),
        (True, False, SUPERSEDED),
        (False, False, NOT_DISPATCHED),
        (False, True, NOT_DISPATCHED),  # no job has no claim to match; gone wins
    ],
)
def test_after_check(job_found: bool, claim_matches: bool, expected: Fate | None) -> None:
    got = after_check(job_found=job_found, claim_matches=claim_matches)
    assert got == expected, (
        f"found={job_found} matches={claim_matches}: expected {expected}, got {got}"
    )


def test_a_message_that_will_not_be_sent_is_acked_and_a_failed_check_requeued() -> None:
    for fate in (NOT_DISPATCHED, SUPERSEDED):
        assert fate.action is Action.ACK and not fate.sent, fate
    assert check_failed() == CHECK_FAILED
    assert CHECK_FAILED.action is Action.REQUEUE and not CHECK_FAILED.sent


def test_a_sent_message_is_acked_once_its_outcome_is_stored() -> None:
    fate = after_outcome()
    assert fate == OUTCOME_STORED and fate.action is Action.ACK and fate.sent, fate


def test_every_fate_has_a_reason_of_its_own() -> None:
    fates = [NOT_DISPATCHED, SUPERSEDED, CHECK_FAILED, OUTCOME_STORED]
    reasons = [f.reason for f in fates]
    assert all(reasons) and len(set(reasons)) == len(reasons), reasons


# -- carrying it out -----------------------------------------------------------------------


class RecordingDelivery:
    def __init__(self, job_id: str = "j1", fails: bool = False) -> None:
        self.job = Claimed("orders", job_id, 1, 1000, 1000, 1, "c1")
        self.redelivered = False
        self.fails = fails
        self.done: list[str] = []

    async def ack(self) -> None:
        self._record("ack")

    async def requeue(self) -> None:
        self._record("requeue")

    async def drop(self) -> None:
        self._record("drop")

    def _record(self, what: str) -> None:
        if self.fails:
            raise ConnectionError("channel closed")
        self.done.append(what)


def dropped(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "timer_messages_dropped_total", {"biz_type": "orders"}
    )
    return value or 0.0


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("sent", [True, False])
async def test_carry_out_settles_the_message_and_its_twins_alike(
    action: Action, sent: bool
) -> None:
    metrics = Metrics()
    deliveries = [RecordingDelivery(), RecordingDelivery(), RecordingDelivery()]
    await carry_out(Fate(action, "because", sent=sent), deliveries, metrics)
    assert [d.done for d in deliveries] == [[action.value]] * 3
    # Dropped: acked without being called back (the twins always; the first unless sent).
    expected = (2 if sent else 3) if action is Action.ACK else 0
    assert dropped(metrics) == expected, f"{action} sent={sent}: expected {expected} dropped"


async def test_a_failed_settle_is_logged_and_the_rest_still_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deliveries = [RecordingDelivery(fails=True), RecordingDelivery()]
    with caplog.at_level(logging.WARNING, logger="broker.fate"):
        await carry_out(OUTCOME_STORED, deliveries, Metrics())
    assert deliveries[1].done == ["ack"]
    warned = [r for r in caplog.records if r.getMessage() == "could not settle message"]
    assert len(warned) == 1 and warned[0].job_id == "j1", caplog.records  # type: ignore[attr-defined]


async def test_each_fate_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="broker.fate"):
        await carry_out(SUPERSEDED, [RecordingDelivery("j7")], Metrics())
    (record,) = [r for r in caplog.records if r.getMessage() == "message settled"]
    got = (record.job_id, record.fate, record.reason)  # type: ignore[attr-defined]
    assert got == ("j7", "ack", SUPERSEDED.reason), got
