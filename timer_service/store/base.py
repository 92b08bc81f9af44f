"""The store: one object per backend that hands each caller its own port.

Storage model (docs/architecture.md, "Storage"), which both adapters keep:
bucket collections by next fire second, a locator by identity, a versioned
index of non-empty seconds, leases and pointers. The rules of a job's life are
not here but in `timer_service.jobs`; the ports only read and apply.
"""

from __future__ import annotations

from typing import Protocol

from timer_service.store.ports.audit import AuditPort
from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.console import ConsolePort
from timer_service.store.ports.dispatch import DispatchPort
from timer_service.store.ports.jobs import JobsPort
from timer_service.store.ports.leases import LeasesPort
from timer_service.store.ports.outcomes import OutcomesPort
from timer_service.store.ports.tokens import TokensPort


class Store(Protocol):
    """A backend: its lifecycle and one port per caller role."""

    buckets: int

    @property
    def biz_types(self) -> BizTypesPort: ...

    @property
    def jobs(self) -> JobsPort: ...

    @property
    def dispatch(self) -> DispatchPort: ...

    @property
    def leases(self) -> LeasesPort: ...

    @property
    def outcomes(self) -> OutcomesPort: ...

    @property
    def console(self) -> ConsolePort: ...

    @property
    def audit(self) -> AuditPort: ...

    @property
    def tokens(self) -> TokensPort: ...

    async def setup(self) -> None:
        """Create collections and indexes; idempotent."""
        ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the backend does not answer."""
        ...
