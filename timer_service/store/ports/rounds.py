"""Claim rounds: what tells a claim never published from one a broker holds.

Before a claim the daemon opens a *round* for its token; it closes the round once
the queue confirmed every message of the claim. A round still open long after it
was opened names jobs that were claimed and never published (a crash, a lost
reply): one record per claim, not a write per job (`ReconcilePort.find_unpublished`
reads them).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol


class RoundsPort(Protocol):
    async def open_round(
        self, claim: str, fence: int, now_ms: int, closing: Collection[str] = ()
    ) -> None:
        """Record that claims under this token may be made from now on; and, in the
        same write, `close_rounds(closing)`."""
        ...

    async def close_rounds(self, claims: Collection[str]) -> None:
        """Every message of these claims was confirmed by the queue."""
        ...
