"""The store as the daemon sees it: the ports its parts are named for, and no
other (it never writes a job's outcome, nor reads the console). Any `Store` is
one; a test may hand in less."""

from __future__ import annotations

from typing import Protocol

from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.brokers import BrokersPort
from timer_service.store.ports.counts import CountsPort
from timer_service.store.ports.leases import LeasesPort
from timer_service.store.ports.pointers import PointersPort
from timer_service.store.ports.reconcile import ReconcilePort
from timer_service.store.ports.rounds import RoundsPort
from timer_service.store.ports.scan import ScanPort
from timer_service.store.ports.sweep import SweepPort


class DaemonPorts(Protocol):
    @property
    def biz_types(self) -> BizTypesPort: ...  # queues to declare, gauges to zero

    @property
    def scan(self) -> ScanPort: ...

    @property
    def pointers(self) -> PointersPort: ...

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
    def brokers(self) -> BrokersPort: ...  # the reconciler reads and forgets brokers
