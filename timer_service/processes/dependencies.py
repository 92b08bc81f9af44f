"""What a component is built from: injected, so that the real process and the
simulation build the same components over different outside worlds."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from broker.sender import Sender
from timer_service import wiring
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import Clock, SystemClock
from timer_service.metric_specs import Role
from timer_service.metrics import Metrics
from timer_service.queue.base import DispatchQueue
from timer_service.settings import Settings
from timer_service.store.base import Store
from timer_service.tracing import NO_TRACING, Tracing, build_tracing

HttpClientFactory = Callable[[Clock, TargetPolicy], Sender]


@dataclass(frozen=True)
class Dependencies:
    clock: Clock
    store: Store
    metrics: Metrics
    instance_id: str  # names a daemon's leases, a broker's heartbeats and marks
    queue: DispatchQueue | None = None  # the API does without
    tracing: Tracing = NO_TRACING
    http_client: HttpClientFactory = Sender  # the broker's callbacks

    def with_queue(self) -> DispatchQueue:
        if self.queue is None:
            raise ValueError("this component needs a queue: Dependencies(queue=...)")
        return self.queue


def instance_id() -> str:
    """Host, pid and a random suffix: unique across restarts of the same pid."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def real_dependencies(
    settings: Settings,
    roles: frozenset[Role],
    *,
    service_name: str,
    mongo_url: str | None = None,
    queue: DispatchQueue | None = None,
) -> Dependencies:
    """The outside world of a production process: the system clock, MongoDB, RabbitMQ
    (for a daemon or a broker, unless `queue` is given), the metrics of `roles` on a
    registry of its own. Nothing connects yet: the lifecycle starts them."""
    if queue is None and roles != frozenset(("api",)):
        queue = wiring.amqp_queue(settings)
    return Dependencies(
        clock=SystemClock(),
        store=wiring.mongo_store(settings, mongo_url),
        metrics=Metrics(roles=roles),
        instance_id=instance_id(),
        queue=queue,
        tracing=build_tracing(settings.otel_exporter, service_name),
    )
