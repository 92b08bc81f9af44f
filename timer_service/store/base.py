"""The store: one object per backend that hands each caller its own port.

Storage model (docs/architecture.md, "Storage"), which both adapters keep:
bucket collections by next fire second, a locator by identity, a versioned
index of non-empty seconds, leases and pointers. The rules of a job's life are
not here but in `timer_service.jobs`; the ports only read and apply.

Each port is named by its caller (docs/architecture.md, "Ports"); `PORTS` lists
them, for the wrappers (`faulty`, `recording`) and the test that keeps the docs'
table in step with the code.
"""

from __future__ import annotations

from typing import Protocol

from timer_service.store.ports.audit import AuditPort
from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.brokers import BrokersPort
from timer_service.store.ports.calendar import CalendarPort
from timer_service.store.ports.console import ConsolePort
from timer_service.store.ports.counts import CountsPort
from timer_service.store.ports.jobs import JobsPort
from timer_service.store.ports.leases import LeasesPort
from timer_service.store.ports.outcomes import OutcomesPort
from timer_service.store.ports.pointers import PointersPort
from timer_service.store.ports.reconcile import ReconcilePort
from timer_service.store.ports.rounds import RoundsPort
from timer_service.store.ports.scan import ScanPort
from timer_service.store.ports.schedules import SchedulesPort
from timer_service.store.ports.sweep import SweepPort
from timer_service.store.ports.tokens import TokensPort

PORTS: dict[str, type] = {
    "biz_types": BizTypesPort,
    "jobs": JobsPort,
    "calendar": CalendarPort,
    "console": ConsolePort,
    "audit": AuditPort,
    "schedules": SchedulesPort,
    "scan": ScanPort,
    "rounds": RoundsPort,
    "reconcile": ReconcilePort,
    "sweep": SweepPort,
    "counts": CountsPort,
    "leases": LeasesPort,
    "pointers": PointersPort,
    "outcomes": OutcomesPort,
    "brokers": BrokersPort,
    "tokens": TokensPort,
}


class Store(Protocol):
    """A backend: its lifecycle and one port per caller."""

    buckets: int

    @property
    def biz_types(self) -> BizTypesPort: ...

    @property
    def jobs(self) -> JobsPort: ...

    @property
    def calendar(self) -> CalendarPort: ...

    @property
    def console(self) -> ConsolePort: ...

    @property
    def audit(self) -> AuditPort: ...

    @property
    def schedules(self) -> SchedulesPort: ...

    @property
    def scan(self) -> ScanPort: ...

    @property
    def rounds(self) -> RoundsPort: ...

    @property
    def reconcile(self) -> ReconcilePort: ...

    @property
    def sweep(self) -> SweepPort: ...

    @property
    def counts(self) -> CountsPort: ...

    @property
    def leases(self) -> LeasesPort: ...

    @property
    def pointers(self) -> PointersPort: ...

    @property
    def outcomes(self) -> OutcomesPort: ...

    @property
    def brokers(self) -> BrokersPort: ...

    @property
    def tokens(self) -> TokensPort: ...

    async def setup(self) -> None:
        """Create collections and indexes; idempotent."""
        ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the backend does not answer."""
        ...
