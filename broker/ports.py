"""The store as the broker sees it: it reads biz types, heartbeats what it holds,
and writes send marks and outcomes; nothing else (it never claims, nor changes a
job through the API's ports). Any `Store` is one; a test may hand in less."""

from __future__ import annotations

from typing import Protocol

from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.brokers import BrokersPort
from timer_service.store.ports.outcomes import OutcomesPort


class BrokerPorts(Protocol):
    @property
    def biz_types(self) -> BizTypesPort: ...

    @property
    def brokers(self) -> BrokersPort: ...

    @property
    def outcomes(self) -> OutcomesPort: ...
