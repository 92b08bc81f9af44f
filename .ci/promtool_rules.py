"""Write the alert rules of rendered PrometheusRule objects as a plain Prometheus rules
file, for `promtool check rules` and `promtool test rules` (tests/promtool/*.test.yml).

Of the annotations only `summary` is kept: the tests check it (its templates and
values) exactly, while descriptions and runbooks are prose that may change freely.
Usage: python .ci/promtool_rules.py RENDERED.yaml OUT/rules.yml  (.ci/static-checks).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

KEPT_ANNOTATIONS = ("summary",)


def rules_file(docs: list[dict[str, Any]]) -> dict[str, Any]:
    groups = []
    for doc in docs:
        if doc.get("kind") != "PrometheusRule":
            continue
        for group in doc["spec"]["groups"]:
            rules = []
            for rule in group["rules"]:
                rule = dict(rule)
                annotations = rule.get("annotations", {})
                rule["annotations"] = {
                    k: annotations[k] for k in KEPT_ANNOTATIONS if k in annotations
                }
                rules.append(rule)
            groups.append({**group, "rules": rules})
    return {"groups": groups}


def main(rendered: Path, out: Path) -> None:
    docs = [doc for doc in yaml.safe_load_all(rendered.read_text()) if doc]
    content = rules_file(docs)
    alerts = [r["alert"] for g in content["groups"] for r in g["rules"] if "alert" in r]
    out.write_text(yaml.safe_dump(content, sort_keys=False))
    print(f"{out}: {len(alerts)} alerts")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
