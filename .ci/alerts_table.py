"""Write k8s/README.md's table of alerts from k8s/base/prometheusrule.yaml, so the two
cannot drift (the hand-written list once named 7 of the 9 rules).

The table sits between ALERTS_BEGIN and ALERTS_END; everything else in the README is
left as it is. tests/unit/test_k8s_readme_alerts.py fails when the README's table is
not what this writes, and .ci/static-checks runs `--check`.
Usage: python .ci/alerts_table.py           (rewrite the table)
       python .ci/alerts_table.py --check   (exit 1 if it is out of date)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "k8s" / "base" / "prometheusrule.yaml"
README = ROOT / "k8s" / "README.md"
ALERTS_BEGIN = (
    "<!-- alerts: written by .ci/alerts_table.py from k8s/base/prometheusrule.yaml;"
    " edit the rules, not this table -->"
)
ALERTS_END = "<!-- end of alerts -->"


def alerts(rule_doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in rule_doc["spec"]["groups"] for r in g["rules"] if "alert" in r]


def cell(text: str) -> str:
    """One line, with the table's separator escaped (GitHub reads `\\|` inside code)."""
    one_line = re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", " ".join(text.split())))
    return one_line.replace("|", "\\|")


def table(rule_doc: dict[str, Any]) -> str:
    rows = [
        "| alert | severity | for | fires when |",
        "| --- | --- | --- | --- |",
    ]
    for rule in alerts(rule_doc):
        rows.append(
            f"| `{rule['alert']}` | {rule['labels']['severity']} | {rule.get('for', '-')} "
            f"| `{cell(rule['expr'])}` |"
        )
    return "\n".join(rows)


def with_table(readme: str, rule_doc: dict[str, Any]) -> str:
    """`readme` with the text between the markers replaced by the rules' table."""
    pattern = re.compile(re.escape(ALERTS_BEGIN) + r"\n.*?" + re.escape(ALERTS_END), re.DOTALL)
    if len(pattern.findall(readme)) != 1:
        raise ValueError(f"{README.name}: expected the markers once:\n{ALERTS_BEGIN}\n{ALERTS_END}")
    return pattern.sub(lambda _: f"{ALERTS_BEGIN}\n{table(rule_doc)}\n{ALERTS_END}", readme)


def main(argv: list[str]) -> int:
    rule_doc = yaml.safe_load(RULES.read_text())
    readme = README.read_text()
    wanted = with_table(readme, rule_doc)
    if "--check" in argv:
        if wanted != readme:
            print(f"{README}: the alerts table is out of date: run .ci/alerts_table.py")
            return 1
        print(f"ok   {README.name}: {len(alerts(rule_doc))} alerts, as in the rules")
        return 0
    README.write_text(wanted)
    print(f"{README}: {len(alerts(rule_doc))} alerts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
