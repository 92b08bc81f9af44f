"""k8s/README.md lists every alert of k8s/base/prometheusrule.yaml, as the rules say:
its table is written by .ci/alerts_table.py, and this fails while it is out of date
(the hand-written list once named 7 of the 9 rules)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load_writer() -> Any:
    spec = importlib.util.spec_from_file_location("alerts_table", ROOT / ".ci/alerts_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def writer() -> Any:
    return load_writer()


@pytest.fixture(scope="module")
def rule_doc(writer: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(writer.RULES.read_text())
    return doc


def test_the_readme_table_is_the_rules(writer: Any, rule_doc: dict[str, Any]) -> None:
    readme = writer.README.read_text()
    assert writer.with_table(readme, rule_doc) == readme, (
        "k8s/README.md's alerts table differs from k8s/base/prometheusrule.yaml: "
        "run .venv/bin/python .ci/alerts_table.py"
    )


def test_every_alert_has_one_row(writer: Any, rule_doc: dict[str, Any]) -> None:
    readme = writer.README.read_text()
    names = [rule["alert"] for rule in writer.alerts(rule_doc)]
    assert len(names) >= 16
    for name in names:
        assert readme.count(f"| `{name}` |") == 1, f"{name}: not one row in k8s/README.md"


def test_a_rule_added_or_changed_makes_the_table_stale(
    writer: Any, rule_doc: dict[str, Any]
) -> None:
    readme = writer.README.read_text()
    added = yaml.safe_load(yaml.safe_dump(rule_doc))
    added["spec"]["groups"][0]["rules"].append(
        {"alert": "TimerNew", "expr": "vector(1)", "labels": {"severity": "warning"}}
    )
    assert writer.with_table(readme, added) != readme
    changed = yaml.safe_load(yaml.safe_dump(rule_doc))
    changed["spec"]["groups"][0]["rules"][0]["for"] = "7m"
    assert writer.with_table(readme, changed) != readme


def test_a_pipe_in_an_expression_is_escaped_for_the_table(writer: Any) -> None:
    assert writer.cell('rate(x{outcome=~"retry|dead"}[5m])\n  > 0') == (
        'rate(x{outcome=~"retry\\|dead"}[5m]) > 0'
    )


def test_a_readme_without_the_markers_is_refused(writer: Any, rule_doc: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="markers"):
        writer.with_table("# Kubernetes manifests\n", rule_doc)


def test_every_alert_has_a_runbook_in_operations_md(writer: Any, rule_doc: dict[str, Any]) -> None:
    headings = [
        line
        for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if line.startswith("### ")
    ]
    missing = [
        rule["alert"]
        for rule in writer.alerts(rule_doc)
        if not any(f"{rule['alert']} " in h for h in headings)
    ]
    assert not missing, f"docs/operations.md has no runbook heading for {missing}"
