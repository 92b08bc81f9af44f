"""`build_api`, `build_daemon`, `build_broker`: settings and dependencies in, a
component out, not started.

The production processes (`commands`), `dev` and the simulation build every
component here. Nothing in a built component reads the environment, the real clock
or a global: all of it comes in through `Dependencies`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from fastapi import FastAPI

from broker.app import Broker
from daemon.app import Daemon
from daemon.schedule_hook import ScheduleHook
from timer_service import wiring
from timer_service.api.app import create_app
from timer_service.callback_targets import TargetPolicy
from timer_service.canary import Canary
from timer_service.processes.dependencies import Dependencies
from timer_service.registration import Registrar
from timer_service.scheduling import Scheduler
from timer_service.settings import Settings


def build_scheduler(deps: Dependencies) -> Scheduler:
    """Recurring schedules over the store; `dev` shares one between the API and the
    daemon (the one place that picks the schedules' store)."""
    return wiring.scheduler(deps.store, deps.metrics, deps.clock)


def build_api(
    settings: Settings,
    deps: Dependencies,
    *,
    scheduler: Scheduler | None = None,
    on_jobs_written: Callable[[Sequence[int]], None] | None = None,
    ready_checks: Sequence[Callable[[], Awaitable[None]]] = (),
) -> FastAPI:
    """The REST API's ASGI app; `on_jobs_written` nudges an in-process daemon."""
    return create_app(
        settings,
        deps.store,
        deps.metrics,
        deps.clock,
        on_jobs_written=on_jobs_written,
        ready_checks=ready_checks,
        scheduler=scheduler or build_scheduler(deps),
        tracing=deps.tracing,
    )


def build_canary(
    settings: Settings,
    deps: Dependencies,
    *,
    on_jobs_written: Callable[[Sequence[int]], None] | None = None,
) -> Canary | None:
    """The API's canary task, or None when TIMER_CANARY_INTERVAL_MS is 0. It creates its
    jobs as the API does (`Registrar`), past the quota: the canary is no business's."""
    if settings.canary_interval_ms == 0:
        return None
    registrar = Registrar(deps.store.jobs, deps.metrics, on_jobs_written=on_jobs_written)
    return Canary(
        deps.store.biz_types,
        registrar,
        deps.clock,
        interval_ms=settings.canary_interval_ms,
        callback_url=settings.canary_url_or_default(),
    )


def build_daemon(
    settings: Settings, deps: Dependencies, *, scheduler: Scheduler | None = None
) -> Daemon:
    return Daemon(
        settings,
        deps.store,
        deps.with_queue(),
        deps.metrics,
        deps.clock,
        holder_id=deps.instance_id,
        schedule_hook=ScheduleHook(scheduler or build_scheduler(deps)),
        tracing=deps.tracing,
    )


def build_broker(settings: Settings, deps: Dependencies) -> Broker:
    return Broker(
        settings,
        deps.store,
        deps.with_queue(),
        deps.metrics,
        deps.clock,
        broker_id=deps.instance_id,
        tracing=deps.tracing,
        sender=deps.http_client(deps.clock, settings.callback_target_policy()),
        own_sender=deps.http_client(deps.clock, TargetPolicy()),
    )
