"""The ops files (k8s/base manifests) agree with the code.

Every setting the ConfigMap, the Secret and the Deployments set is one
`timer_service.settings.Settings` (or docs/operations.md) knows, with a value it
accepts; every Deployment has probes, resources and a locked-down security
context. The base is rendered with `kubectl kustomize` when kubectl is on PATH,
else by `render_builtin` (tests/unit/manifests_harness.py); with kubectl both
run and must agree. The alerts' and dashboard's metric names:
test_ops_metric_names.py.

Schema validation (Kubernetes and CRD JSON schemas), PromQL syntax and
hadolint are in .ci/static-checks, which also runs this file.
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.unit.manifests_harness import (
    BASE,
    OVERLAY_SECRET,
    ROLE_PORTS,
    SETTINGS_DOCS,
    Doc,
    all_containers,
    by_kind_name,
    of_kind,
    render_builtin,
    render_kubectl,
    selects,
)
from timer_service.settings import Settings


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
