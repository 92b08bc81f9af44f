"""Claim tokens whose round is open before any claim uses them.

A round is the store's record that claims under a token may exist whose
messages the queue has not confirmed yet (`DispatchPort.open_round`); the
publisher closes it once every message of the claim is confirmed. A round left
open names jobs claimed and never published (the daemon died between the two,
or a claim's reply was lost): the reconciler republishes them. One record per
claim instead of a "published" write per job keeps the hot path at one write
per job for the claim.

So that opening a round adds no wait at the due moment, the scanner opens the
next token's round while it claims with the current one (`prepare`). A spare
token is used only while young: the reconciler deletes rounds that name no job
once they are `reconcile_after_ms` old, and a round must never be deleted
before its claim is made.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from daemon.publisher import ClaimTokens
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.store.ports.dispatch import DispatchPort

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Spare:
    token: str
    fence: int
    opened_at: int


class Rounds:
    def __init__(
        self,
        dispatch: DispatchPort,
        tokens: ClaimTokens,
        clock: Clock,
        metrics: Metrics,
        max_spare_age_ms: int,
    ) -> None:
        self._dispatch = dispatch
        self._tokens = tokens
        self._clock = clock
        self._metrics = metrics
        self._max_spare_age_ms = max_spare_age_ms
        self._spare: _Spare | None = None

    async def take(self, fence: int) -> str:
        """A token whose round is open: the spare if it is fresh, else a new one."""
        spare, self._spare = self._spare, None
        now = self._clock.now_ms()
        if spare is not None and spare.fence == fence:
            if now - spare.opened_at <= self._max_spare_age_ms:
                return spare.token
        token = self._tokens.next(fence)
        await self._dispatch.open_round(token, fence, now)
        return token

    async def prepare(self, fence: int) -> None:
        """Open the next token's round ahead of need; a failure only means the next
        `take` opens one itself."""
        if self._spare is not None:
            return
        token = self._tokens.next(fence)
        now = self._clock.now_ms()
        try:
            await self._dispatch.open_round(token, fence, now)
        except Exception as exc:
            self._metrics.store_error("open_round")
            log.warning("opening a claim round failed", extra={"error": repr(exc)})
            return
        if self._spare is None:
            self._spare = _Spare(token, fence, now)
