"""What the handlers are given: settings and the injected store, metrics and clock, kept
on `app.state` by `create_app` and handed to each handler by `Depends` (`Context`,
`SchedulerDep`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, cast

from fastapi import Depends, Request

from timer_service.api.admission import AdmissionGate
from timer_service.api.job_input import Limits
from timer_service.audit import AuditAction, new_entry
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.quota import RegistrationQuota
from timer_service.registration import Registrar
from timer_service.scheduling import Scheduler
from timer_service.settings import Settings
from timer_service.store.base import Store

log = logging.getLogger(__name__)

JobsWritten = Callable[[Sequence[int]], None]
ReadyCheck = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class ApiContext:
    settings: Settings
    store: Store
    metrics: Metrics
    clock: Clock
    on_jobs_written: JobsWritten | None = None
    ready_checks: Sequence[ReadyCheck] = ()
    admission: AdmissionGate | None = None

    @cached_property
    def registrar(self) -> Registrar:
        return Registrar(
            self.store.jobs,
            self.metrics,
            biz_types=self.store.biz_types,
            on_jobs_written=self.on_jobs_written,
            quota=RegistrationQuota(),
            calendar=self.store.calendar,
        )

    @cached_property
    def job_limits(self) -> Limits:
        return Limits(self.settings.max_payload_bytes, self.settings.horizon_ms)

    @cached_property
    def target_policy(self) -> TargetPolicy:
        return self.settings.callback_target_policy()

    async def audit(
        self, request: Request, action: AuditAction, biz_type: str, **fields: Any
    ) -> None:
        """Record an operator action, by the token's name the auth layer put on the
        request. Recorded before the answer: a store error fails the request (whose
        change is done; retrying it is safe), rather than leaving the action unrecorded."""
        actor = getattr(request.state, "actor", "anonymous")
        entry = new_entry(self.clock.now_ms(), actor, action, biz_type, **fields)
        await self.store.audit.record(entry)

    def jobs_written(self, seconds: Sequence[int]) -> None:
        """Tell whoever listens (the in-process daemon of `dev`) which seconds got jobs;
        a failing listener never fails the request, whose write is already done."""
        if self.on_jobs_written is None or not seconds:
            return
        try:
            self.on_jobs_written(seconds)
        except Exception:
            log.exception("on_jobs_written listener failed")


# The dependencies are async, though they only read: FastAPI runs a sync one in its
# thread pool, a thread hop per request (tests/unit/test_api_dependencies.py).
async def api_context(request: Request) -> ApiContext:
    return cast(ApiContext, request.app.state.context)


async def api_scheduler(request: Request) -> Scheduler:
    return cast(Scheduler, request.app.state.scheduler)


Context = Annotated[ApiContext, Depends(api_context)]
SchedulerDep = Annotated[Scheduler, Depends(api_scheduler)]
