"""Every name a benchmark imports from another file of bench/ exists there.

Benchmarks are run by hand, not by the tests, and several import their helpers
inside functions (a worker subprocess stays light): `bench/peers_bench.py` failed
with `ImportError: proc_cpu_s` long after the helper moved to
`bench/_common.process_cpu_s`. Read from the source (nothing is imported or run),
so the optional peers' packages need not be installed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted(BENCH.glob("*.py"))


def top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try):  # `try: import x` / `if TYPE_CHECKING:`
            names |= top_level_names(ast.Module(body=node.body, type_ignores=[]))
    return names


def bench_imports(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, bench module, name) of every `from <bench module> import name`, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module.removeprefix("bench.")
            if (BENCH / f"{module}.py").exists():
                found += [(node.lineno, module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_names_imported_from_bench_modules_exist(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    missing = []
    for line, module, name in bench_imports(tree):
        defined = top_level_names(ast.parse((BENCH / f"{module}.py").read_text()))
        if name not in defined:
            missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)


def test_the_check_catches_the_peers_bench_break() -> None:
    tree = ast.parse("def f():\n    from lateness_bench import proc_cpu_s\n")
    ((_, module, name),) = bench_imports(tree)
    defined = top_level_names(ast.parse((BENCH / f"{module}.py").read_text()))
    assert name not in defined
