"""Claim tokens whose round is open before any claim uses them.

A round is the store's record that claims under a token may exist whose
messages the queue has not confirmed yet (`RoundsPort.open_round`); the
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

Rounds whose claims are confirmed are closed in the same write that opens the
next round (one round trip per claim for the pair, not two), or on their own
within `CLOSE_WITHIN_MS` if no round is opened meanwhile: a round left open a
second longer than needed only matters to the reconciler, which waits
`reconcile_after_ms` (a minute by default) before it looks; with a shorter
wait, within an eighth of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection
from dataclasses import dataclass

from daemon.publisher import ClaimTokens
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.store.ports.rounds import RoundsPort

log = logging.getLogger(__name__)

CLOSE_WITHIN_MS = 1000


@dataclass(frozen=True, slots=True)
class _Spare:
    token: str
    fence: int
    opened_at: int


class Rounds:
    def __init__(
        self,
        rounds: RoundsPort,
        tokens: ClaimTokens,
        clock: Clock,
        metrics: Metrics,
        max_spare_age_ms: int,
    ) -> None:
        self._rounds = rounds
        self._tokens = tokens
        self._clock = clock
        self._metrics = metrics
        self._max_spare_age_ms = max_spare_age_ms
        # max_spare_age_ms is half the reconciler's wait: close within an eighth of it.
        self._close_within_ms = min(CLOSE_WITHIN_MS, max_spare_age_ms // 4)
        self._spare: _Spare | None = None
        self._closing: set[str] = set()  # confirmed claims whose round is still open
        self._closer: asyncio.Task[None] | None = None

    async def take(self, fence: int) -> str:
        """A token whose round is open: the spare if it is fresh, else a new one."""
        spare, self._spare = self._spare, None
        now = self._clock.now_ms()
        if spare is not None and spare.fence == fence:
            if now - spare.opened_at <= self._max_spare_age_ms:
                return spare.token
        token = self._tokens.next(fence)
        await self._open(token, fence, now)
        return token

    async def prepare(self, fence: int) -> None:
        """Open the next token's round ahead of need; a failure only means the next
        `take` opens one itself."""
        if self._spare is not None:
            return
        token = self._tokens.next(fence)
        now = self._clock.now_ms()
        try:
            await self._open(token, fence, now)
        except Exception as exc:
            self._metrics.store_error("open_round")
            log.warning("opening a claim round failed", extra={"error": repr(exc)})
            return
        if self._spare is None:
            self._spare = _Spare(token, fence, now)

    def confirmed(self, claims: Collection[str]) -> None:
        """Every message of these claims was confirmed by the queue: their rounds close
        with the next round opened, or within `CLOSE_WITHIN_MS`."""
        if not claims:
            return
        self._closing.update(claims)
        if self._closer is None or self._closer.done():
            self._closer = asyncio.create_task(self._close_later(), name="daemon-close-rounds")

    async def close_now(self) -> None:
        """Close the confirmed claims' rounds now (at stop, and before a lease is handed
        over); a failure only costs the reconciler a spare republish later."""
        closing, self._closing = self._closing, set()
        if not closing:
            return
        try:
            await self._rounds.close_rounds(closing)
        except Exception as exc:
            self._metrics.store_error("close_rounds")
            log.warning("closing claim rounds failed", extra={"error": repr(exc)})

    async def stop(self) -> None:
        if self._closer is not None:
            self._closer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._closer
        await self.close_now()

    async def _close_later(self) -> None:
        await self._clock.sleep(self._close_within_ms / 1000)
        await self.close_now()

    async def _open(self, token: str, fence: int, now: int) -> None:
        closing, self._closing = self._closing, set()
        try:
            await self._rounds.open_round(token, fence, now, closing)
        except Exception:
            self._closing |= closing  # still to close, next time
            raise
