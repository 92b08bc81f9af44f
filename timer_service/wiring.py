"""Building the outside-world adapters from settings, once, at process start."""

from __future__ import annotations

from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.queue.base import DispatchQueue
from timer_service.schedule_store import MemoryScheduleStore, MongoScheduleStore, ScheduleStore
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


def schedule_store(store: Store) -> ScheduleStore:
    """Schedules live beside the jobs: in the same MongoDB database, or in memory."""
    from timer_service.store.mongo import MongoStore

    if isinstance(store, MongoStore):
        return MongoScheduleStore(store.database)
    return MemoryScheduleStore()


def scheduler(store: Store, metrics: Metrics, clock: Clock) -> Scheduler:
    return Scheduler(schedule_store(store), store.jobs, metrics, clock)
