"""The ops files' metric names (k8s/base: the PrometheusRule and the Grafana dashboard)
are ones `timer_service.metrics.Metrics` really exports, and the dashboard shows every
contract metric. Run by .ci/static-checks beside test_ops_manifests.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pytest

from tests.unit.manifests_harness import (
    CONTRACT_METRICS,
    DASHBOARD,
    Doc,
    of_kind,
)
from timer_service.metrics import Metrics

# -- metric names -------------------------------------------------------------

# A metric name: not part of a longer identifier. String literals are blanked
# first, so a label value such as biz_type="timer_x" is not a reference.
METRIC_NAME_RE = re.compile(r"(?<![A-Za-z0-9_:])timer_[a-z0-9_]*[a-z0-9](?![A-Za-z0-9_:])")
STRING_LITERAL_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}
STRIPPABLE = ("_bucket", "_sum", "_count", "_total")


def exported_series(metrics: Metrics) -> dict[str, tuple[str, str]]:
    """Series name queryable in Prometheus -> (metric family, type)."""
    series: dict[str, tuple[str, str]] = {}
    for family in metrics.registry.collect():
        if family.type not in SERIES_SUFFIXES:
            raise AssertionError(f"no series naming rule for {family.name} ({family.type})")
        for suffix in SERIES_SUFFIXES[family.type]:
            series[family.name + suffix] = (family.name, family.type)
    return series


def referenced_metrics(expr: str) -> set[str]:
    return set(METRIC_NAME_RE.findall(STRING_LITERAL_RE.sub('""', expr)))


def split_suffix(name: str) -> tuple[str, str]:
    for suffix in STRIPPABLE:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def unknown_metrics(exprs: Iterable[str], series: dict[str, tuple[str, str]]) -> list[str]:
    """Each referenced name no exported series has, with what was probably meant."""
    families = {family: kind for family, kind in series.values()}
    problems = []
    for name in sorted(set().union(*map(referenced_metrics, exprs))):
        if name in series:
            continue
        family, _suffix = split_suffix(name)
        for candidate in (name, family):
            if candidate in families:
                kind = families[candidate]
                valid = ", ".join(candidate + s for s in SERIES_SUFFIXES[kind])
                problems.append(f"{name}: {candidate} is a {kind}, query {valid}")
                break
        else:
            problems.append(f"{name}: not exported by timer_service.metrics")
    return problems


def rule_expressions(rule_doc: Doc) -> list[str]:
    return [rule["expr"] for group in rule_doc["spec"]["groups"] for rule in group["rules"]]


def dashboard_expressions(dashboard: Any) -> list[str]:
    """Every query of the dashboard: panel targets (rows nest panels) and variables."""
    found: list[str] = []
    if isinstance(dashboard, dict):
        for key, value in dashboard.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            elif key == "query" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(dashboard_expressions(value))
    elif isinstance(dashboard, list):
        for item in dashboard:
            found.extend(dashboard_expressions(item))
    return found


@pytest.fixture(scope="module")
def series() -> dict[str, tuple[str, str]]:
    return exported_series(Metrics())


@pytest.fixture(scope="module")
def dashboard() -> Doc:
    return json.loads(DASHBOARD.read_text())


def test_metrics_facade_exports_the_contract_metrics(series: dict) -> None:
    missing = [name for name in CONTRACT_METRICS if name not in series]
    assert not missing, f"timer_service.metrics does not export {missing}"


def test_alert_rules_reference_only_exported_metrics(rendered: list[Doc], series: dict) -> None:
    (rule_doc,) = of_kind(rendered, "PrometheusRule")
    exprs = rule_expressions(rule_doc)
    assert len(exprs) >= 5
    unknown = unknown_metrics(exprs, series)
    assert not unknown, "PrometheusRule queries unknown metrics:\n" + "\n".join(unknown)


def test_dashboard_references_only_exported_metrics(dashboard: Doc, series: dict) -> None:
    exprs = dashboard_expressions(dashboard)
    assert len(exprs) >= 10
    unknown = unknown_metrics(exprs, series)
    assert not unknown, "grafana-dashboard.json queries unknown metrics:\n" + "\n".join(unknown)


def test_dashboard_shows_every_contract_metric(dashboard: Doc) -> None:
    shown = set().union(*map(referenced_metrics, dashboard_expressions(dashboard)))
    missing = [name for name in CONTRACT_METRICS if name not in shown]
    assert not missing, f"the dashboard has no panel on {missing}"


def test_alerts_cover_lag_leader_dead_letters_failures_and_lateness(rendered: list[Doc]) -> None:
    (rule_doc,) = of_kind(rendered, "PrometheusRule")
    exprs = rule_expressions(rule_doc)
    alerted = set().union(*map(referenced_metrics, exprs))
    for name in (
        "timer_scan_lag_seconds",
        "timer_daemon_leader",
        "timer_callbacks_total",
        "timer_dispatch_lateness_seconds_bucket",
    ):
        assert name in alerted, f"no alert on {name}"
    assert any('outcome="dead"' in expr for expr in exprs), "no dead-letter alert"
    assert any("absent(timer_daemon_leader)" in expr for expr in exprs), "no absent-leader alert"
    for group in rule_doc["spec"]["groups"]:
        for rule in group["rules"]:
            annotations = rule.get("annotations", {})
            for key in ("summary", "description", "runbook"):
                assert annotations.get(key), f"{rule['alert']} has no {key} annotation"


def test_alerts_cover_canary_delivery_consumption_backlog_and_errors(
    rendered: list[Doc],
) -> None:
    """The outages the contract's Metrics section names: no canary for three
    intervals, delivery lateness p99 over 1 s, due jobs with no broker consuming,
    persistent store and queue errors; and a broker that stops sending."""
    (rule_doc,) = of_kind(rendered, "PrometheusRule")
    exprs = rule_expressions(rule_doc)
    alerted = set().union(*map(referenced_metrics, exprs))
    for name in (
        "timer_canary_last_success_timestamp_seconds",
        "timer_delivery_lateness_seconds_bucket",
        "timer_broker_consuming",
        "timer_biz_type_paused",
        "timer_jobs_by_state",
        "timer_store_errors_total",
        "timer_queue_errors_total",
    ):
        assert name in alerted, f"no alert on {name}"
    assert any("absent(timer_canary_last_success_timestamp_seconds)" in e for e in exprs)


def test_dashboard_ships_in_a_labelled_configmap(rendered: list[Doc], dashboard: Doc) -> None:
    (configmap,) = [
        doc
        for doc in of_kind(rendered, "ConfigMap")
        if doc["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    assert json.loads(configmap["data"]["grafana-dashboard.json"]) == dashboard
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids)), "duplicate panel ids"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # The broken case from the issue: a name nobody exports.
        (
            "rate(timer_does_not_exist[5m]) > 0",
            ["timer_does_not_exist: not exported by timer_service.metrics"],
        ),
        # A counter is only queryable with _total.
        (
            "rate(timer_callbacks[5m])",
            ["timer_callbacks: timer_callbacks is a counter, query timer_callbacks_total"],
        ),
        # A gauge has no _bucket; a histogram has no bare series.
        (
            "timer_scan_lag_seconds_bucket + timer_dispatch_lateness_seconds",
            [
                "timer_dispatch_lateness_seconds: timer_dispatch_lateness_seconds is a "
                "histogram, query timer_dispatch_lateness_seconds_bucket, "
                "timer_dispatch_lateness_seconds_sum, timer_dispatch_lateness_seconds_count",
                "timer_scan_lag_seconds_bucket: timer_scan_lag_seconds is a gauge, "
                "query timer_scan_lag_seconds",
            ],
        ),
        # Valid series, and names inside label values, are fine.
        (
            "histogram_quantile(0.99, sum by (le) (rate(timer_delivery_lateness_seconds_bucket"
            '{biz_type="timer_fake"}[5m]))) / timer_callback_duration_seconds_count'
            " + timer_callbacks_total + timer_daemon_leader",
            [],
        ),
    ],
)
def test_unknown_metric_check_catches_broken_names(
    expr: str, expected: list[str], series: dict
) -> None:
    assert unknown_metrics([expr], series) == expected


def test_broken_rule_document_is_reported(rendered: list[Doc], series: dict) -> None:
    (rule_doc,) = of_kind(rendered, "PrometheusRule")
    broken = json.loads(json.dumps(rule_doc))
    broken["spec"]["groups"][0]["rules"].append(
        {"alert": "Broken", "expr": "sum(rate(timer_does_not_exist_total[5m])) > 0"}
    )
    assert unknown_metrics(rule_expressions(broken), series) == [
        "timer_does_not_exist_total: not exported by timer_service.metrics"
    ]
