"""The ops files (k8s/base: manifests, alerts, dashboard) agree with the code.

Every metric the PrometheusRule and the Grafana dashboard query is one that
`timer_service.metrics.Metrics` really exports; every setting the ConfigMap,
the Secret and the Deployments set is one `timer_service.settings.Settings`
(or docs/operations.md) knows, with a value it accepts; every Deployment has probes,
resources and a locked-down security context. The base is rendered with
`kubectl kustomize` when kubectl is on PATH, else by `render_builtin` below
(the subset of kustomize the base uses); with kubectl both run and must agree.

Schema validation (Kubernetes and CRD JSON schemas), PromQL syntax and
hadolint are in .ci/static-checks, which also runs this file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # in the `test` extra: a missing PyYAML must fail, not skip these checks

from timer_service.metrics import Metrics
from timer_service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "k8s" / "base"
DASHBOARD = BASE / "grafana-dashboard.json"
SETTINGS_DOCS = (ROOT / "docs" / "operations.md",)

# docs/operations.md, "Metrics": what the dashboard must show at the least.
CONTRACT_METRICS = (
    "timer_jobs_created_total",
    "timer_jobs_dispatched_total",
    "timer_dispatch_lateness_seconds_bucket",
    "timer_delivery_lateness_seconds_bucket",
    "timer_callbacks_total",
    "timer_callback_duration_seconds_bucket",
    "timer_scan_lag_seconds",
    "timer_daemon_leader",
    "timer_rate_limited_total",
)

ROLE_PORTS = {"api": 8080, "daemon": 9101, "broker": 9102}
OVERLAY_SECRET = "timer-service-secrets"  # the Deployments read it; the base ships none

Doc = dict[str, Any]


# -- rendering --------------------------------------------------------------


def render_kubectl(base: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    out = subprocess.run(
        [kubectl, "kustomize", str(base)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"kubectl kustomize {base} failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


_KUSTOMIZATION_KEYS = {
    "apiVersion",
    "kind",
    "resources",
    "images",
    "generatorOptions",
    "configMapGenerator",
}


def render_builtin(base: Path) -> list[Doc]:
    """Render the base without kubectl: the kustomize features it uses, no more.

    Anything else in kustomization.yaml is an error here, so this cannot
    silently drift from what kustomize would do.
    """
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - _KUSTOMIZATION_KEYS
    if unsupported:
        raise NotImplementedError(f"render_builtin does not handle {sorted(unsupported)}")

    docs: list[Doc] = []
    for resource in kustomization.get("resources", []):
        path = base / resource
        if not path.is_file():
            raise NotImplementedError(f"render_builtin handles files only, not {resource}")
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)

    options = kustomization.get("generatorOptions", {})
    if set(options) - {"labels", "disableNameSuffixHash"} or not options.get(
        "disableNameSuffixHash"
    ):
        raise NotImplementedError("render_builtin needs disableNameSuffixHash: true")
    for generator in kustomization.get("configMapGenerator", []):
        if set(generator) - {"name", "files", "literals"}:
            raise NotImplementedError(f"render_builtin: configMapGenerator {generator}")
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
            key, _, file = entry.rpartition("=")
            data[key or Path(file).name] = (base / file).read_text()
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        metadata: Doc = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})

    for image in kustomization.get("images", []):
        for container in all_containers(docs):
            name, _, _tag = container["image"].partition(":")
            if name == image["name"]:
                new_name = image.get("newName", name)
                new_tag = image.get("newTag", _tag)
                container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name
    return docs


def all_containers(docs: Iterable[Doc]) -> Iterator[Doc]:
    for doc in docs:
        pod_spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        yield from pod_spec.get("containers", [])
        yield from pod_spec.get("initContainers", [])


def by_kind_name(docs: Iterable[Doc]) -> dict[tuple[str, str], Doc]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


@pytest.fixture(scope="module")
def rendered() -> list[Doc]:
    return render_kubectl(BASE) if shutil.which("kubectl") else render_builtin(BASE)


def of_kind(docs: Iterable[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def test_kustomization_renders_every_resource(rendered: list[Doc]) -> None:
    kinds = sorted(doc["kind"] for doc in rendered)
    expected = {
        "ConfigMap": 2,
        "Deployment": 3,
        "HorizontalPodAutoscaler": 1,
        "PodDisruptionBudget": 3,
        "NetworkPolicy": 3,
        "PrometheusRule": 1,
        "Service": 3,
        "ServiceAccount": 1,
        "ServiceMonitor": 1,
    }
    got = {kind: kinds.count(kind) for kind in set(kinds)}
    assert got == expected, f"expected {expected}, rendered {got}"
    names = [(doc["kind"], doc["metadata"]["name"]) for doc in rendered]
    assert len(names) == len(set(names)), f"duplicate objects in {names}"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="compares with kubectl kustomize")
def test_builtin_renderer_agrees_with_kubectl() -> None:
    kubectl = by_kind_name(render_kubectl(BASE))
    builtin = by_kind_name(render_builtin(BASE))
    assert sorted(builtin) == sorted(kubectl)
    differ = [key for key in kubectl if kubectl[key] != builtin[key]]
    assert not differ, f"render_builtin differs from kubectl kustomize on {differ}"


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


# -- settings -----------------------------------------------------------------


def known_setting_names() -> set[str]:
    names = {f"TIMER_{field.upper()}" for field in Settings.model_fields}
    for doc in SETTINGS_DOCS:
        names |= set(re.findall(r"`(TIMER_[A-Z0-9_]+)`", doc.read_text()))
    return names


def set_env(rendered: list[Doc]) -> dict[str, dict[str, str]]:
    """Where each TIMER_* variable is set -> its values by name."""
    places: dict[str, dict[str, str]] = {}
    for doc in of_kind(rendered, "ConfigMap"):
        if "grafana_dashboard" not in doc["metadata"].get("labels", {}):
            places[f"ConfigMap/{doc['metadata']['name']}"] = dict(doc.get("data", {}))
    for doc in of_kind(rendered, "Secret"):
        places[f"Secret/{doc['metadata']['name']}"] = {
            **doc.get("data", {}),
            **doc.get("stringData", {}),
        }
    for doc in of_kind(rendered, "Deployment"):
        for container in all_containers([doc]):
            places[f"Deployment/{doc['metadata']['name']}/{container['name']}"] = {
                env["name"]: env.get("value", "") for env in container.get("env", [])
            }
    return places


def test_every_setting_is_one_the_service_reads(rendered: list[Doc]) -> None:
    known = known_setting_names()
    unknown = [
        f"{place}: {name}"
        for place, values in set_env(rendered).items()
        for name in values
        if not name.startswith("TIMER_") or name not in known
    ]
    assert not unknown, "settings the service does not read:\n" + "\n".join(unknown)


def test_settings_values_are_accepted_by_settings(rendered: list[Doc]) -> None:
    for place, values in set_env(rendered).items():
        fields = {name.removeprefix("TIMER_").lower(): value for name, value in values.items()}
        fields = {k: v for k, v in fields.items() if k in Settings.model_fields}
        try:
            Settings.model_validate(fields)
        except Exception as error:  # pydantic's ValidationError, shown whole
            pytest.fail(f"{place} sets values Settings rejects: {error}")


def test_known_settings_include_contract_names() -> None:
    # Guards the check above against an empty or misread list.
    known = known_setting_names()
    for name in ("TIMER_MONGO_URL", "TIMER_AMQP_URL", "TIMER_API_TOKEN", "TIMER_LEASE_TTL_MS"):
        assert name in known


# -- workloads ----------------------------------------------------------------


def config_values(rendered: list[Doc]) -> dict[str, str]:
    (config,) = [
        doc
        for doc in of_kind(rendered, "ConfigMap")
        if doc["metadata"]["name"] == "timer-service-config"
    ]
    return config["data"]


def container_port(container: Doc, port: int | str) -> int:
    for declared in container.get("ports", []):
        if port in (declared["containerPort"], declared.get("name")):
            return int(declared["containerPort"])
    raise AssertionError(f"container {container['name']} declares no port {port!r}")


def test_deployments_have_probes_resources_and_security(rendered: list[Doc]) -> None:
    deployments = of_kind(rendered, "Deployment")
    roles = set()
    config = config_values(rendered)
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod.get("automountServiceAccountToken") is False, name
        grace = pod.get("terminationGracePeriodSeconds", 30)
        assert grace > float(config["TIMER_SHUTDOWN_GRACE_S"]), (
            f"{name}: terminationGracePeriodSeconds {grace} must exceed TIMER_SHUTDOWN_GRACE_S"
        )
        (container,) = pod["containers"]
        role = container["args"][0]
        roles.add(role)
        assert deployment["spec"]["replicas"] >= 2, f"{name}: one replica has no failover"
        _name, _, tag = container["image"].partition(":")
        assert tag and tag != "latest", f"{name}: image {container['image']} is not pinned"

        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            assert probe in container, f"{name} has no {probe}"
            http = container[probe]["httpGet"]
            assert http["path"] == path, f"{name}: {probe} on {http['path']}, not {path}"
            port = container_port(container, http["port"])
            assert port == ROLE_PORTS[role], f"{name}: {probe} on port {port}"

        for section in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                assert resource in container["resources"].get(section, {}), (
                    f"{name} has no {section}.{resource}"
                )

        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
        assert "/tmp" in mounts, f"{name}: a read-only root needs a writable /tmp"

        env = {e["name"]: e["value"] for e in container.get("env", [])}
        if role == "api":
            assert int(config["TIMER_HTTP_PORT"]) == ROLE_PORTS["api"]
        else:
            assert int(env["TIMER_METRICS_PORT"]) == ROLE_PORTS[role], name
    assert roles == set(ROLE_PORTS), f"Deployments run {roles}"


def test_env_sources_exist(rendered: list[Doc]) -> None:
    objects = by_kind_name(rendered)
    objects[("Secret", OVERLAY_SECRET)] = {}  # an overlay provides it (test_ops_network_secrets.py)
    for container in all_containers(rendered):
        for source in container.get("envFrom", []):
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if key in source:
                    assert (kind, source[key]["name"]) in objects, f"{kind} {source[key]['name']}"


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def pods_of(rendered: list[Doc], selector: dict[str, str]) -> list[Doc]:
    return [
        doc
        for doc in of_kind(rendered, "Deployment")
        if selects(selector, doc["spec"]["template"]["metadata"]["labels"])
    ]


def test_services_reach_their_pods(rendered: list[Doc]) -> None:
    for service in of_kind(rendered, "Service"):
        name = service["metadata"]["name"]
        (deployment,) = pods_of(rendered, service["spec"]["selector"])
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        for port in service["spec"]["ports"]:
            container_port(container, port["targetPort"])
        if name == "timer-api":
            assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
            assert [p["port"] for p in service["spec"]["ports"]] == [8080]


def test_daemon_and_broker_have_disruption_budgets(rendered: list[Doc]) -> None:
    covered = set()
    for pdb in of_kind(rendered, "PodDisruptionBudget"):
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["minAvailable"] == 1
        for deployment in pods_of(rendered, pdb["spec"]["selector"]["matchLabels"]):
            covered.add(deployment["metadata"]["name"])
    assert {"timer-daemon", "timer-broker"} <= covered, f"PDBs cover {covered}"


def test_hpa_scales_the_api(rendered: list[Doc]) -> None:
    (hpa,) = of_kind(rendered, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "timer-api")
    assert ("Deployment", "timer-api") in by_kind_name(rendered)
    assert hpa["spec"]["minReplicas"] >= 2


def test_servicemonitor_scrapes_all_three_services(rendered: list[Doc]) -> None:
    (monitor,) = of_kind(rendered, "ServiceMonitor")
    selector = monitor["spec"]["selector"]
    ports = {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}
    scraped = set()
    for service in of_kind(rendered, "Service"):
        labels = service["metadata"].get("labels", {})
        if not selects(selector.get("matchLabels", {}), labels):
            continue
        if not all(
            expr["operator"] == "In" and labels.get(expr["key"]) in expr["values"]
            for expr in selector.get("matchExpressions", [])
        ):
            continue
        if ports & {port["name"] for port in service["spec"]["ports"]}:
            scraped.add(service["metadata"]["name"])
    assert scraped == {"timer-api", "timer-daemon-metrics", "timer-broker-metrics"}, scraped
