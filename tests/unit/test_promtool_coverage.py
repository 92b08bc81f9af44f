"""Every alert in k8s/ has promtool unit tests (tests/promtool/*.test.yml) that see it
fire and see it stay quiet; .ci/static-checks runs them with `promtool test rules`."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "k8s" / "base" / "prometheusrule.yaml"
TESTS = sorted((ROOT / "tests" / "promtool").glob("*.test.yml"))


def alerts() -> set[str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r}


def expectations() -> list[tuple[str, bool]]:
    """(alert, fires) for every alert_rule_test of every test file."""
    found = []
    for path in TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["rules.yml"], f"{path.name}: tests the rendered rules only"
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", ()):
                found.append((case["alertname"], bool(case.get("exp_alerts"))))
    return found


def test_every_alert_is_seen_firing_and_quiet() -> None:
    seen = expectations()
    firing = {name for name, fires in seen if fires}
    quiet = {name for name, fires in seen if not fires}
    assert TESTS, "no tests/promtool/*.test.yml"
    assert not alerts() - firing, f"never tested firing: {sorted(alerts() - firing)}"
    assert not alerts() - quiet, f"never tested quiet: {sorted(alerts() - quiet)}"
    assert not {name for name, _ in seen} - alerts(), "tests name alerts k8s/ does not have"


def load_extractor() -> Any:
    spec = importlib.util.spec_from_file_location("promtool_rules", ROOT / ".ci/promtool_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rules_promtool_tests_keep_every_rule_and_only_the_summary() -> None:
    doc = yaml.safe_load(RULES.read_text())
    content = load_extractor().rules_file([doc])
    rules = [r for g in content["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == alerts()
    original = {r["alert"]: r for g in doc["spec"]["groups"] for r in g["rules"]}
    for rule in rules:
        want = original[rule["alert"]]
        assert rule["annotations"] == {"summary": want["annotations"]["summary"]}, rule["alert"]
        same = {k: v for k, v in rule.items() if k != "annotations"}
        assert same == {k: v for k, v in want.items() if k != "annotations"}, rule["alert"]
