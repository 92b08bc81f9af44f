"""What an attempt's answer means for its job, as the lane records it: the verdict
(broker.callback.judge, with the backoff's jitter drawn here), and a log line for an
attempt that failed."""

from __future__ import annotations

import logging
import random

from broker.callback import Response, Verdict, judge
from timer_service.dispatch import OutcomeKind
from timer_service.model import BizType, Job

log = logging.getLogger("broker.lane")  # the lane's lines, under the lane's logger


def judge_answer(
    response: Response, biz: BizType, job: Job, attempt: int, known_at: int
) -> Verdict:
    """The attempt's verdict; an answer that cannot be judged is a failed attempt,
    retried (never an exception out of the send)."""
    try:
        spread = random.random()  # the backoff's jitter
        return judge(response, biz.retry, attempt, job.budget_base, known_at, spread)
    except Exception as exc:
        log.exception("callback answer not understood", extra={"biz_type": biz.biz_type})
        unreadable = Response(None, error=f"unreadable answer: {type(exc).__name__}")
        return judge(unreadable, biz.retry, attempt, job.budget_base, known_at)


def log_failure(biz_type: str, job_id: str, attempt: int, verdict: Verdict) -> None:
    """One line for an attempt that did not deliver: what failed and what comes next."""
    if verdict.kind is OutcomeKind.DELIVERED:
        return
    log.info(
        "callback failed",
        extra={
            "biz_type": biz_type,
            "job_id": job_id,
            "attempt": attempt,
            "outcome": verdict.kind.value,
            "error": verdict.error,
            "next_attempt_at": verdict.next_attempt_at,
        },
    )
