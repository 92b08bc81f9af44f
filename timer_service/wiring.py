"""Building the outside-world adapters from settings, once, at process start."""

from __future__ import annotations

from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.queue.base import DispatchQueue
from timer_service.scheduling import Scheduler
from timer_service.settings import Settings
from timer_service.store.base import Store


def mongo_store(settings: Settings, url: str | None = None) -> Store:
    from timer_service.store.mongo import MongoStore

    return MongoStore(
        url or settings.mongo_url_or_default(),
        settings.mongo_db,
        buckets=settings.buckets,
        partitions=settings.partitions,
        retention_ms=settings.retention_ms,
    )


def amqp_queue(settings: Settings, url: str | None = None) -> DispatchQueue:
    from timer_service.queue.amqp import AmqpQueue

    return AmqpQueue(url or settings.amqp_url_or_default(), settings.queue_prefix)


def scheduler(store: Store, metrics: Metrics, clock: Clock) -> Scheduler:
    return Scheduler(store.schedules, store.jobs, metrics, clock)
