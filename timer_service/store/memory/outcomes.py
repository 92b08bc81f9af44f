"""In-memory outcomes: the pre-send mark and the attempts' results."""

from __future__ import annotations

from collections.abc import Sequence

from timer_service import jobs as machine
from timer_service.dispatch import Outcome, SendRef
from timer_service.errors import StaleEpoch
from timer_service.model import Job
from timer_service.store.memory.state import MemoryState


class MemoryOutcomes:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def start_sending(
        self, refs: Sequence[SendRef], send_token: str, now_ms: int
    ) -> dict[str, Job]:
        stale = frozenset(
            ref.biz_type
            for ref in refs
            if ref.epoch is not None and ref.epoch != self._s.epochs.get(ref.biz_type)
        )
        if stale:
            raise StaleEpoch(stale)
        out = {}
        for ref in refs:
            job = self._s.job_at(ref)
            if job is None:
                continue
            change = machine.start_sending(ref.claim, send_token, now_ms, ref.retake)
            started = self._s.apply(job, change)
            if started is not None:
                out[started.key] = started
        return out

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        for result in outcomes:
            job = self._s.job_at(result.ref)
            if job is None:
                continue
            if self._s.apply(job, machine.outcome(result, now_ms)) is None:
                self._s.apply(job, machine.outcome_after_cancel(result, now_ms))
