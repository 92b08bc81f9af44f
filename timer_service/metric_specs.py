"""What each process exports: one declaration per metric (name, type, labels, help,
buckets, the roles whose work it counts). `timer_service.metrics` builds the
metrics from this table; a process registers only its own role's (the contract's
Metrics section), `dev` all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from timer_service.constants import LATENCY_BUCKETS_S

Role = Literal["api", "daemon", "broker"]
Kind = Literal["counter", "gauge", "histogram"]

ROLES: frozenset[Role] = frozenset(("api", "daemon", "broker"))
API: frozenset[Role] = frozenset(("api",))
DAEMON: frozenset[Role] = frozenset(("daemon",))
BROKER: frozenset[Role] = frozenset(("broker",))


@dataclass(frozen=True)
class MetricSpec:
    name: str  # without the `_total` prometheus_client adds to a counter
    kind: Kind
    help: str
    roles: frozenset[Role]
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S  # histograms only


def _spec(name: str, kind: Kind, roles: Iterable[Role], help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, kind, help, frozenset(roles), tuple(labels))


SPECS: tuple[MetricSpec, ...] = (
    # -- the API
    _spec(
        "timer_http_requests",
        "counter",
        API,
        "API requests answered, by route template and status",
        "method",
        "route",
        "status",
    ),
    _spec(
        "timer_http_request_duration_seconds",
        "histogram",
        API,
        "API request duration, from the request's arrival to the end of its answer",
        "method",
        "route",
    ),
    _spec("timer_jobs_created", "counter", API, "Jobs accepted (201)", "biz_type"),
    _spec(
        "timer_api_requests_inflight",
        "gauge",
        API,
        "/v1 requests at work now (bounded by TIMER_API_MAX_INFLIGHT)",
    ),
    _spec(
        "timer_api_requests_shed",
        "counter",
        API,
        "/v1 requests refused with 503 because the API was at its in-flight limit",
    ),
    _spec(
        "timer_registrations_over_quota",
        "counter",
        API,
        "Job creates refused with 429 by the biz type's registration quota",
        "biz_type",
    ),
    # -- the daemon
    _spec(
        "timer_seconds_restored",
        "counter",
        DAEMON,
        "Seconds-index entries restored for pending jobs that none pointed at",
    ),
    _spec("timer_jobs_dispatched", "counter", DAEMON, "Jobs published to the queue", "biz_type"),
    _spec(
        "timer_dispatch_lateness_seconds",
        "histogram",
        DAEMON,
        "Publish time minus due time (0 when published ahead for the notifier to hold)",
        "biz_type",
    ),
    _spec(
        "timer_jobs_by_state",
        "gauge",
        DAEMON,
        "Jobs per biz type in each open state (pending, dispatched, dead), "
        "sampled every TIMER_STATS_INTERVAL_S by the leading daemon",
        "biz_type",
        "state",
    ),
    _spec("timer_scan_lag_seconds", "gauge", DAEMON, "Now minus the daemon's time pointer"),
    _spec(
        "timer_daemon_leader",
        "gauge",
        DAEMON,
        "1 while this daemon holds the lease of at least one partition",
    ),
    _spec(
        "timer_daemon_partitions_owned",
        "gauge",
        DAEMON,
        "Partitions whose lease this daemon holds",
    ),
    _spec(
        "timer_lease_changes",
        "counter",
        DAEMON,
        "Times this daemon gained or lost the lease",
        "change",
    ),
    _spec(
        "timer_publish_failures",
        "counter",
        DAEMON,
        "Publish batches the queue did not confirm",
    ),
    _spec(
        "timer_jobs_reconciled",
        "counter",
        DAEMON,
        "Dispatched jobs published again by the reconciler",
        "biz_type",
    ),
    # -- the broker
    _spec(
        "timer_delivery_lateness_seconds",
        "histogram",
        BROKER,
        "First-attempt callback send time minus due time",
        "biz_type",
    ),
    _spec(
        "timer_callbacks_early",
        "counter",
        BROKER,
        "Callbacks sent before their due time or next_attempt_at (must stay 0)",
        "biz_type",
    ),
    _spec(
        "timer_callback_earliness_seconds",
        "histogram",
        BROKER,
        "How early a callback sent before its time was (only early ones are observed)",
        "biz_type",
    ),
    _spec(
        "timer_broker_clock_lead_seconds",
        "gauge",
        BROKER,
        "How far this broker's clock is ahead of the store's, as its skew guard "
        "learnt it (0 when not ahead): sends wait that much longer",
    ),
    _spec(
        "timer_messages_handed_back",
        "counter",
        BROKER,
        "Held messages given back to the queue before RabbitMQ's consumer timeout "
        "(TIMER_BROKER_MAX_HOLD_MS); they come back at once, unsent",
        "biz_type",
    ),
    _spec("timer_callbacks", "counter", BROKER, "Callback outcomes", "biz_type", "outcome"),
    _spec(
        "timer_callback_duration_seconds",
        "histogram",
        BROKER,
        "Callback round trip",
        "biz_type",
    ),
    _spec(
        "timer_rate_limited",
        "counter",
        BROKER,
        "Callbacks held back by the rate limit or in-flight cap",
        "biz_type",
    ),
    _spec(
        "timer_messages_dropped",
        "counter",
        BROKER,
        "Messages not sent because the job was cancelled or the message was stale",
        "biz_type",
    ),
    # -- shared: a schedule advances from the API (put) and the daemon (each run)
    _spec(
        "timer_schedule_runs",
        "counter",
        ("api", "daemon"),
        "Occurrences of recurring schedules turned into jobs",
        "biz_type",
    ),
    _spec("timer_store_errors", "counter", ROLES, "Store operations that failed", "operation"),
    # -- what the shipped alerts need (k8s/base/prometheusrule.yaml)
    _spec(
        "timer_broker_consuming",
        "gauge",
        BROKER,
        "1 for each biz type this broker consumes now",
        "biz_type",
    ),
    _spec(
        "timer_biz_type_paused",
        "gauge",
        BROKER,
        "1 while a biz type this broker consumes is paused, else 0",
        "biz_type",
    ),
    _spec(
        "timer_queue_errors",
        "counter",
        ("daemon", "broker"),
        "Queue operations that failed",
        "operation",
    ),
    # the canary's callback arrives at an API endpoint (see the canary)
    _spec(
        "timer_canary_lateness_seconds",
        "histogram",
        API,
        "Lateness of the service's own canary callbacks",
    ),
    _spec(
        "timer_canary_last_success_timestamp_seconds",
        "gauge",
        API,
        "When the last canary callback arrived (0 until the first)",
    ),
)
