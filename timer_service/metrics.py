"""Metrics facade: domain code says what happened; only this module knows Prometheus."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from timer_service.metric_specs import ROLES, SPECS, MetricSpec, Role
from timer_service.model import is_reserved

__all__ = ["CONTENT_TYPE_LATEST", "HTTP_METHODS", "UNMATCHED_ROUTE", "Metrics", "render"]

# Every process imports this module before it makes a metric: the `*_created`
# series prometheus_client adds beside each counter and histogram (a timestamp
# per label set, doubling the series for nothing a query uses) are off for the
# whole process from here on. prometheus_client reads the flag when it renders.
disable_created_metrics()

# The API's request metrics label the method only with these (else "other"), and a
# path that matches no route with UNMATCHED_ROUTE: a client cannot mint label values.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED_ROUTE = "unmatched"


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


class Metrics:
    """The metrics of `roles` (metric_specs.py), registered on an injected registry.

    Each process creates one for its role (`dev` for all three, shared); a method
    whose metric belongs to another role does nothing, so code shared between roles
    (the store adapters, the scheduler) may call any of them.

    A reserved biz type (the canary's, `model.is_reserved`) gets no series of any
    per-biz-type metric: filtered here, once, so no caller need remember; the canary
    has metrics of its own (`canary_arrived`).
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        roles: Iterable[Role] = ROLES,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.roles = frozenset(roles)
        _register_runtime_collectors(self.registry)
        self._m: dict[str, Any] = {
            spec.name: _build(spec, self.registry) if spec.roles & self.roles else _UNEXPORTED
            for spec in SPECS
        }
        self._was_leader = False

    # -- API
    def job_created(self, biz_type: str, count: int = 1) -> None:
        self._of("timer_jobs_created", biz_type).inc(count)

    def api_inflight(self, count: int) -> None:
        self._m["timer_api_requests_inflight"].set(count)

    def api_request_shed(self) -> None:
        self._m["timer_api_requests_shed"].inc()

    def registrations_over_quota(self, biz_type: str, count: int = 1) -> None:
        self._of("timer_registrations_over_quota", biz_type).inc(count)

    def http_request(self, method: str, route: str, status: int, duration_s: float) -> None:
        """One answered API request; `route` is the route's template, never the raw path."""
        method = method if method in HTTP_METHODS else "other"
        self._m["timer_http_requests"].labels(method, route, str(status)).inc()
        self._m["timer_http_request_duration_seconds"].labels(method, route).observe(duration_s)

    # -- daemon
    def job_dispatched(self, biz_type: str, lateness_s: float) -> None:
        self._of("timer_jobs_dispatched", biz_type).inc()
        self._of("timer_dispatch_lateness_seconds", biz_type).observe(max(0.0, lateness_s))

    def scan_lag(self, seconds: float) -> None:
        self._m["timer_scan_lag_seconds"].set(max(0.0, seconds))

    def partitions_owned(self, count: int) -> None:
        self._m["timer_daemon_partitions_owned"].set(count)

    def leader(self, is_leader: bool) -> None:
        if self._was_leader != is_leader:
            self._m["timer_lease_changes"].labels("acquired" if is_leader else "lost").inc()
        self._was_leader = is_leader
        self._m["timer_daemon_leader"].set(1 if is_leader else 0)

    def jobs_by_state(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the whole sample; `{}` (a daemon that stopped leading) removes it, so
        that only the leader's figures are ever exported."""
        self._m["timer_jobs_by_state"].clear()
        for (biz_type, state), count in counts.items():
            self._of("timer_jobs_by_state", biz_type, state).set(count)

    def publish_failed(self) -> None:
        self._m["timer_publish_failures"].inc()

    def job_reconciled(self, biz_type: str) -> None:
        self._of("timer_jobs_reconciled", biz_type).inc()

    # -- broker
    def callback_sent(self, biz_type: str, attempt: int, lateness_s: float) -> None:
        if attempt == 1:
            self._of("timer_delivery_lateness_seconds", biz_type).observe(max(0.0, lateness_s))

    def callback_early(self, biz_type: str, early_s: float) -> None:
        """A callback went out before its due time (or a retry's next_attempt_at), by
        this process's clock: must never happen; the amount goes to the histogram."""
        self._of("timer_callbacks_early", biz_type).inc()
        self._of("timer_callback_earliness_seconds", biz_type).observe(early_s)

    def callback_outcome(self, biz_type: str, outcome: str, duration_s: float) -> None:
        self._of("timer_callbacks", biz_type, outcome).inc()
        self._of("timer_callback_duration_seconds", biz_type).observe(duration_s)

    def rate_limited(self, biz_type: str) -> None:
        self._of("timer_rate_limited", biz_type).inc()

    def message_dropped(self, biz_type: str) -> None:
        self._of("timer_messages_dropped", biz_type).inc()

    def message_handed_back(self, biz_type: str) -> None:
        self._of("timer_messages_handed_back", biz_type).inc()

    def clock_lead(self, lead_s: float) -> None:
        self._m["timer_broker_clock_lead_seconds"].set(lead_s)

    # -- schedules
    def schedule_run(self, biz_type: str) -> None:
        self._of("timer_schedule_runs", biz_type).inc()

    # -- any
    def seconds_restored(self, count: int) -> None:
        self._m["timer_seconds_restored"].inc(count)

    def store_error(self, operation: str) -> None:
        self._m["timer_store_errors"].labels(operation).inc()

    # -- what the shipped alerts need (k8s/base/prometheusrule.yaml)
    def biz_types_consumed(self, paused: Mapping[str, bool]) -> None:
        """The biz types this broker consumes now, each with whether it is paused;
        replaces the last call's, so a biz type let go of disappears."""
        self._m["timer_broker_consuming"].clear()
        self._m["timer_biz_type_paused"].clear()
        for biz_type, is_paused in paused.items():
            self._of("timer_broker_consuming", biz_type).set(1)
            self._of("timer_biz_type_paused", biz_type).set(1 if is_paused else 0)

    def queue_error(self, operation: str) -> None:
        self._m["timer_queue_errors"].labels(operation).inc()

    def canary_arrived(self, lateness_s: float, at_s: float) -> None:
        """A canary callback arrived at `at_s` (epoch seconds), `lateness_s` after due."""
        self._m["timer_canary_lateness_seconds"].observe(max(0.0, lateness_s))
        self._m["timer_canary_last_success_timestamp_seconds"].set(at_s)

    def canary_last_success_s(self) -> float | None:
        """When this process last saw a canary arrive (epoch seconds); None if never."""
        value = self.registry.get_sample_value("timer_canary_last_success_timestamp_seconds")
        return value or None  # 0 until the first; absent where the API's metrics are not

    def _of(self, name: str, biz_type: str, *labels: str) -> Any:
        """The series of `biz_type` (and `labels`) of metric `name`; none for a reserved
        biz type."""
        if is_reserved(biz_type):
            return _UNEXPORTED
        return self._m[name].labels(biz_type, *labels)


def _register_runtime_collectors(registry: CollectorRegistry) -> None:
    """The process (CPU, memory, open files), garbage collector and Python version
    collectors prometheus_client puts on its global registry, on this one: each
    process serves its own registry only."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)


def _build(spec: MetricSpec, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    if spec.kind == "counter":
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == "gauge":
        return Gauge(spec.name, spec.help, spec.labels, registry=registry)
    return Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry)


class _Unexported:
    """Stands in for a metric of another role: takes every update, keeps nothing."""

    def labels(self, *_: str) -> _Unexported:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def clear(self) -> None:
        pass


_UNEXPORTED = _Unexported()
