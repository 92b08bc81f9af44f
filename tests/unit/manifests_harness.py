"""Rendering k8s/base for the ops tests: `kubectl kustomize` when kubectl is on PATH,
else `render_builtin` (the subset of kustomize the base uses), the `rendered` fixture
(offered by tests/unit/conftest.py) and what the checks share."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # in the `test` extra: a missing PyYAML must fail, not skip these checks

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
    "timer_callbacks_early_total",
    "timer_daemon_partitions_owned",
    "timer_canary_lateness_seconds_bucket",
    "timer_canary_last_success_timestamp_seconds",
)

ROLE_PORTS = {"api": 8080, "daemon": 9101, "broker": 9102}
OVERLAY_SECRET = "timer-service-secrets"  # the Deployments read it; the base ships none

Doc = dict[str, Any]


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


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())
