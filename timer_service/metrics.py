"""Metrics facade: domain code says what happened; only this module knows Prometheus."""

from __future__ import annotations

from collections.abc import Mapping

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

from timer_service.constants import LATENCY_BUCKETS_S

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
    """All metrics of the contract, registered on an injected registry.

    Each process creates one and uses the part that matches its work; `dev`
    shares one between its three roles.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        _register_runtime_collectors(r)
        self._http_requests = Counter(
            "timer_http_requests",
            "API requests answered, by route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self._http_duration = Histogram(
            "timer_http_request_duration_seconds",
            "API request duration, from the request's arrival to the end of its answer",
            ["method", "route"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._created = Counter(
            "timer_jobs_created", "Jobs accepted (201)", ["biz_type"], registry=r
        )
        self._api_inflight = Gauge(
            "timer_api_requests_inflight",
            "/v1 requests at work now (bounded by TIMER_API_MAX_INFLIGHT)",
            registry=r,
        )
        self._api_shed = Counter(
            "timer_api_requests_shed",
            "/v1 requests refused with 503 because the API was at its in-flight limit",
            registry=r,
        )
        self._over_quota = Counter(
            "timer_registrations_over_quota",
            "Job creates refused with 429 by the biz type's registration quota",
            ["biz_type"],
            registry=r,
        )
        self._seconds_restored = Counter(
            "timer_seconds_restored",
            "Seconds-index entries restored for pending jobs that none pointed at",
            registry=r,
        )
        self._dispatched = Counter(
            "timer_jobs_dispatched", "Jobs published to the queue", ["biz_type"], registry=r
        )
        self._dispatch_lateness = Histogram(
            "timer_dispatch_lateness_seconds",
            "Publish time minus due time (0 when published ahead for the notifier to hold)",
            ["biz_type"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._delivery_lateness = Histogram(
            "timer_delivery_lateness_seconds",
            "First-attempt callback send time minus due time",
            ["biz_type"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._early = Counter(
            "timer_callbacks_early",
            "Callbacks sent before their due time or next_attempt_at (must stay 0)",
            ["biz_type"],
            registry=r,
        )
        self._earliness = Histogram(
            "timer_callback_earliness_seconds",
            "How early a callback sent before its time was (only early ones are observed)",
            ["biz_type"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._clock_lead = Gauge(
            "timer_broker_clock_lead_seconds",
            "How far this broker's clock is ahead of the store's, as its skew guard "
            "learnt it (0 when not ahead): sends wait that much longer",
            registry=r,
        )
        self._handed_back = Counter(
            "timer_messages_handed_back",
            "Held messages given back to the queue before RabbitMQ's consumer timeout "
            "(TIMER_BROKER_MAX_HOLD_MS); they come back at once, unsent",
            ["biz_type"],
            registry=r,
        )
        self._callbacks = Counter(
            "timer_callbacks", "Callback outcomes", ["biz_type", "outcome"], registry=r
        )
        self._callback_duration = Histogram(
            "timer_callback_duration_seconds",
            "Callback round trip",
            ["biz_type"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._jobs_by_state = Gauge(
            "timer_jobs_by_state",
            "Jobs per biz type in each open state (pending, dispatched, dead), "
            "sampled every TIMER_STATS_INTERVAL_S by the leading daemon",
            ["biz_type", "state"],
            registry=r,
        )
        self._scan_lag = Gauge(
            "timer_scan_lag_seconds", "Now minus the daemon's time pointer", registry=r
        )
        self._leader = Gauge(
            "timer_daemon_leader",
            "1 while this daemon holds the lease of at least one partition",
            registry=r,
        )
        self._partitions_owned = Gauge(
            "timer_daemon_partitions_owned",
            "Partitions whose lease this daemon holds",
            registry=r,
        )
        self._rate_limited = Counter(
            "timer_rate_limited",
            "Callbacks held back by the rate limit or in-flight cap",
            ["biz_type"],
            registry=r,
        )
        self._lease_changes = Counter(
            "timer_lease_changes",
            "Times this daemon gained or lost the lease",
            ["change"],
            registry=r,
        )
        self._publish_failures = Counter(
            "timer_publish_failures", "Publish batches the queue did not confirm", registry=r
        )
        self._reconciled = Counter(
            "timer_jobs_reconciled",
            "Dispatched jobs published again by the reconciler",
            ["biz_type"],
            registry=r,
        )
        self._dropped = Counter(
            "timer_messages_dropped",
            "Messages not sent because the job was cancelled or the message was stale",
            ["biz_type"],
            registry=r,
        )
        self._schedule_runs = Counter(
            "timer_schedule_runs",
            "Occurrences of recurring schedules turned into jobs",
            ["biz_type"],
            registry=r,
        )
        self._store_errors = Counter(
            "timer_store_errors", "Store operations that failed", ["operation"], registry=r
        )
        self._declare_alerting_metrics(r)

    def _declare_alerting_metrics(self, r: CollectorRegistry) -> None:
        """What the shipped alerts need beyond the families above
        (k8s/base/prometheusrule.yaml; docs/operations.md, "Alerts and runbooks")."""
        self._broker_consuming = Gauge(
            "timer_broker_consuming",
            "1 for each biz type this broker consumes now",
            ["biz_type"],
            registry=r,
        )
        self._biz_type_paused = Gauge(
            "timer_biz_type_paused",
            "1 while a biz type this broker consumes is paused, else 0",
            ["biz_type"],
            registry=r,
        )
        self._queue_errors = Counter(
            "timer_queue_errors", "Queue operations that failed", ["operation"], registry=r
        )
        self._canary_lateness = Histogram(
            "timer_canary_lateness_seconds",
            "Lateness of the service's own canary callbacks",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self._canary_last_success = Gauge(
            "timer_canary_last_success_timestamp_seconds",
            "When the last canary callback arrived (0 until the first)",
            registry=r,
        )

    # -- API
    def job_created(self, biz_type: str, count: int = 1) -> None:
        self._created.labels(biz_type).inc(count)

    def api_inflight(self, count: int) -> None:
        self._api_inflight.set(count)

    def api_request_shed(self) -> None:
        self._api_shed.inc()

    def registrations_over_quota(self, biz_type: str, count: int = 1) -> None:
        self._over_quota.labels(biz_type).inc(count)

    def http_request(self, method: str, route: str, status: int, duration_s: float) -> None:
        """One answered API request; `route` is the route's template, never the raw path."""
        method = method if method in HTTP_METHODS else "other"
        self._http_requests.labels(method, route, str(status)).inc()
        self._http_duration.labels(method, route).observe(duration_s)

    # -- daemon
    def job_dispatched(self, biz_type: str, lateness_s: float) -> None:
        self._dispatched.labels(biz_type).inc()
        self._dispatch_lateness.labels(biz_type).observe(max(0.0, lateness_s))

    def scan_lag(self, seconds: float) -> None:
        self._scan_lag.set(max(0.0, seconds))

    def partitions_owned(self, count: int) -> None:
        self._partitions_owned.set(count)

    def leader(self, is_leader: bool) -> None:
        previous = self._leader._value.get()  # type: ignore[attr-defined]
        if bool(previous) != is_leader:
            self._lease_changes.labels("acquired" if is_leader else "lost").inc()
        self._leader.set(1 if is_leader else 0)

    def jobs_by_state(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the whole sample; `{}` (a daemon that stopped leading) removes it, so
        that only the leader's figures are ever exported."""
        self._jobs_by_state.clear()
        for (biz_type, state), count in counts.items():
            self._jobs_by_state.labels(biz_type, state).set(count)

    def publish_failed(self) -> None:
        self._publish_failures.inc()

    def job_reconciled(self, biz_type: str) -> None:
        self._reconciled.labels(biz_type).inc()

    # -- broker
    def callback_sent(self, biz_type: str, attempt: int, lateness_s: float) -> None:
        if attempt == 1:
            self._delivery_lateness.labels(biz_type).observe(max(0.0, lateness_s))

    def callback_early(self, biz_type: str, early_s: float) -> None:
        """A callback went out before its due time (or a retry's next_attempt_at), by
        this process's clock: must never happen; the amount goes to the histogram."""
        self._early.labels(biz_type).inc()
        self._earliness.labels(biz_type).observe(early_s)

    def callback_outcome(self, biz_type: str, outcome: str, duration_s: float) -> None:
        self._callbacks.labels(biz_type, outcome).inc()
        self._callback_duration.labels(biz_type).observe(duration_s)

    def rate_limited(self, biz_type: str) -> None:
        self._rate_limited.labels(biz_type).inc()

    def message_dropped(self, biz_type: str) -> None:
        self._dropped.labels(biz_type).inc()

    def message_handed_back(self, biz_type: str) -> None:
        self._handed_back.labels(biz_type).inc()

    def clock_lead(self, lead_s: float) -> None:
        self._clock_lead.set(lead_s)

    # -- schedules
    def schedule_run(self, biz_type: str) -> None:
        self._schedule_runs.labels(biz_type).inc()

    # -- any
    def seconds_restored(self, count: int) -> None:
        self._seconds_restored.inc(count)

    def store_error(self, operation: str) -> None:
        self._store_errors.labels(operation).inc()

    # -- what the alerts need (see _declare_alerting_metrics)
    def biz_types_consumed(self, paused: Mapping[str, bool]) -> None:
        """The biz types this broker consumes now, each with whether it is paused;
        replaces the last call's, so a biz type let go of disappears."""
        self._broker_consuming.clear()
        self._biz_type_paused.clear()
        for biz_type, is_paused in paused.items():
            self._broker_consuming.labels(biz_type).set(1)
            self._biz_type_paused.labels(biz_type).set(1 if is_paused else 0)

    def queue_error(self, operation: str) -> None:
        self._queue_errors.labels(operation).inc()

    def canary_arrived(self, lateness_s: float, at_s: float) -> None:
        """A canary callback arrived at `at_s` (epoch seconds), `lateness_s` after due."""
        self._canary_lateness.observe(max(0.0, lateness_s))
        self._canary_last_success.set(at_s)


def _register_runtime_collectors(registry: CollectorRegistry) -> None:
    """The process (CPU, memory, open files), garbage collector and Python version
    collectors prometheus_client puts on its global registry, on this one: each
    process serves its own registry only."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
