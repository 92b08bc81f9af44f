"""In-memory store: the same semantics as the MongoDB adapter, for `dev` without a
database, unit tests and benchmarks. Ships in the package on purpose (the fake
lives beside the real adapter and one contract suite keeps it honest).
"""

from __future__ import annotations

from timer_service.clock import Clock
from timer_service.store.memory.audit import MemoryAudit
from timer_service.store.memory.biz_types import MemoryBizTypes
from timer_service.store.memory.brokers import MemoryBrokers
from timer_service.store.memory.calendar import MemoryCalendar
from timer_service.store.memory.console import MemoryConsole
from timer_service.store.memory.counts import MemoryCounts
from timer_service.store.memory.jobs import MemoryJobs
from timer_service.store.memory.leases import MemoryLeases
from timer_service.store.memory.outcomes import MemoryOutcomes
from timer_service.store.memory.pointers import MemoryPointers
from timer_service.store.memory.reconcile import MemoryReconcile
from timer_service.store.memory.rounds import MemoryRounds
from timer_service.store.memory.scan import MemoryScan
from timer_service.store.memory.schedules import MemorySchedules
from timer_service.store.memory.scope import Scope
from timer_service.store.memory.state import MemoryState
from timer_service.store.memory.sweep import MemorySweep
from timer_service.store.memory.tokens import MemoryTokens


class MemoryStore:
    def __init__(
        self,
        buckets: int = 60,
        retention_ms: int = 30 * 86_400_000,
        clock: Clock | None = None,
        partitions: int = 1,
        state: MemoryState | None = None,
    ) -> None:
        self.buckets = buckets
        self.retention_ms = retention_ms
        self.partitions = partitions
        self.state = state or MemoryState(buckets, partitions, clock=clock)
        self.biz_types = MemoryBizTypes(self.state)
        self.jobs = MemoryJobs(self.state)
        self.calendar = MemoryCalendar(self.state)
        scope = Scope()  # this process's partitions: `ScanPort.own`
        self.scan = MemoryScan(self.state, scope)
        self.rounds = MemoryRounds(self.state, scope)
        self.reconcile = MemoryReconcile(self.state, scope)
        self.sweep = MemorySweep(self.state, scope)
        self.counts = MemoryCounts(self.state, scope)
        self.leases = MemoryLeases(self.state)
        self.pointers = MemoryPointers(self.state)
        self.brokers = MemoryBrokers(self.state)
        self.outcomes = MemoryOutcomes(self.state)
        self.console = MemoryConsole(self.state)
        self.audit = MemoryAudit(retention_ms)
        self.schedules = MemorySchedules(self.state)
        self.tokens = MemoryTokens()

    def sibling(self) -> MemoryStore:
        """Another process's adapter over the same data: its own partition scope
        (`ScanPort.own`), as each daemon process has."""
        return MemoryStore(
            self.buckets, self.retention_ms, partitions=self.partitions, state=self.state
        )

    @property
    def closed(self) -> bool:
        return self.state.closed

    async def setup(self) -> None:
        pass

    async def close(self) -> None:
        self.state.closed = True

    async def ping(self) -> None:
        if self.state.closed:
            raise ConnectionError("store is closed")


__all__ = ["MemoryStore"]
