"""docs/architecture.md against the code: the store ports table names every port
with its methods (so the table cannot drift from `timer_service/store/ports/`),
and the code map names only files that exist."""

from __future__ import annotations

import re
from pathlib import Path

from timer_service.store.base import PORTS, Store

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
MAX_METHODS = 8  # issue 29: a wider port has more than one caller
NAME = re.compile(r"`([A-Za-z_][\w.]*)`")
PATH = re.compile(r"`([\w./-]+)`")


def section(title: str) -> list[str]:
    """The table rows (without the header) of the section headed `title`."""
    lines = DOC.read_text().splitlines()
    start = lines.index(title)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append(line)
    return rows[1:]  # the first is the header


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def methods_of(protocol: type) -> set[str]:
    return {n for n, m in vars(protocol).items() if not n.startswith("_") and callable(m)}


def documented_ports() -> dict[str, tuple[str, set[str]]]:
    """Store attribute -> (port name, its methods) as the table says. Only the names
    outside parentheses count as methods (a note may name other things)."""
    table = {}
    for row in section("## Store ports"):
        attribute, port, _caller, methods = cells(row)
        plain = re.sub(r"\([^)]*\)", "", methods)
        table[attribute.strip("`")] = (port.strip("`"), set(NAME.findall(plain)))
    return table


def test_the_ports_table_names_every_port_of_the_store() -> None:
    documented = documented_ports()
    in_code = {attr: proto.__name__ for attr, proto in PORTS.items()}
    assert {a: p for a, (p, _) in documented.items()} == in_code


def test_the_ports_table_lists_each_ports_methods() -> None:
    documented = documented_ports()
    for attribute, protocol in PORTS.items():
        _, methods = documented[attribute]
        assert methods == methods_of(protocol), (
            f"{protocol.__name__}: the docs say {sorted(methods)}, "
            f"the code has {sorted(methods_of(protocol))}"
        )


def test_no_store_port_has_more_than_eight_methods() -> None:
    wide = {p.__name__: len(methods_of(p)) for p in PORTS.values()}
    assert max(wide.values()) <= MAX_METHODS, wide


def test_the_store_protocol_hands_out_every_port() -> None:
    properties = {n for n, m in vars(Store).items() if isinstance(m, property)}
    assert properties == set(PORTS)


def test_the_code_map_names_only_files_that_exist() -> None:
    """The first path of a row is from the repository's root; the others in the
    first column are beside it. A row for a directory names files in it."""
    missing = []
    for row in section("### Code map"):
        where, what = cells(row)[:2]
        paths = PATH.findall(where)
        base = ROOT / paths[0]
        if not base.exists():
            missing.append(paths[0])
        for other in paths[1:]:
            if not (base.parent / other).exists():
                missing.append(f"{base.parent.relative_to(ROOT)}/{other}")
        if paths[0].endswith("/"):
            for name in PATH.findall(what):
                if name.endswith((".py", "/")) and not (base / name).exists():
                    missing.append(f"{paths[0]}{name}")
    assert missing == [], f"the code map names files that do not exist: {missing}"
