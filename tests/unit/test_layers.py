"""The layer rules, as a test rather than a habit (issue 29; docs/architecture.md,
"Code map"):

- the domain (job rules, schedules, quotas, the timing wheel, the rate limiter,
  the callback target policy) imports no driver, framework or metrics client, so
  it stays plain Python, tested in microseconds;
- no production module but the wiring imports a store adapter: services take
  ports (`timer_service/store/ports/`), and only the wiring picks the backend;
- the MongoDB driver is imported only by the MongoDB adapter (before issue 29 the
  schedules' adapters sat outside the store, and `scheduling.py` reached pymongo).

Read from the source (every `import` statement, module- or function-level), not
by importing it: fast, and a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("timer_service", "daemon", "broker")

DOMAIN = (
    "timer_service/jobs.py",
    "timer_service/model.py",
    "timer_service/dispatch.py",
    "timer_service/schedules.py",
    "timer_service/quota.py",
    "timer_service/callback_targets.py",
    "timer_service/lateness.py",
    "daemon/wheel.py",
    "broker/ratelimit.py",
)
# Drivers, frameworks and the metrics client (bson ships with pymongo).
OUTSIDE_WORLD = (
    "pymongo",
    "bson",
    "aio_pika",
    "aiormq",
    "prometheus_client",
    "fastapi",
    "starlette",
    "aiohttp",
)

ADAPTERS = ("timer_service.store.mongo", "timer_service.store.memory")
# The one place that picks a backend from the settings.
MAY_IMPORT_ADAPTERS = ("timer_service/wiring.py",)
MONGO_DRIVER = ("pymongo", "bson")
MONGO_ADAPTER = "timer_service/store/mongo"


def package_of(path: Path) -> str:
    """The package a relative import in this file starts from."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1])


def imported(path: Path) -> Iterator[tuple[int, str]]:
    return imports_in(path.read_text(), package_of(path))


def imports_in(source: str, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`; `from a import b`
    yields both `a` and `a.b` (b may be a module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            yield node.lineno, origin
            for alias in node.names:
                yield node.lineno, f"{origin}.{alias.name}"


def within(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def production_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_domain_modules_exist() -> None:
    """A renamed domain module must be renamed here, not silently left unchecked."""
    assert [m for m in DOMAIN if not (ROOT / m).is_file()] == []


def test_the_domain_imports_no_driver_framework_or_metrics_client() -> None:
    broken = [
        f"{module}:{line} imports {name}"
        for module in DOMAIN
        for line, name in imported(ROOT / module)
        if within(name, OUTSIDE_WORLD)
    ]
    assert broken == [], "the domain must stay plain Python:\n" + "\n".join(broken)


def test_only_the_wiring_imports_a_store_adapter() -> None:
    adapter_dirs = [ROOT / root.replace(".", "/") for root in ADAPTERS]
    broken = []
    for path in production_files():
        relative = path.relative_to(ROOT).as_posix()
        if relative in MAY_IMPORT_ADAPTERS or any(path.is_relative_to(d) for d in adapter_dirs):
            continue  # the wiring; an adapter's own modules import each other
        for line, name in imported(path):
            if within(name, ADAPTERS):
                broken.append(f"{relative}:{line} imports {name}")
    assert broken == [], "services take ports; only the wiring picks an adapter:\n" + "\n".join(
        broken
    )


def test_only_the_mongodb_adapter_imports_the_driver() -> None:
    broken = [
        f"{path.relative_to(ROOT).as_posix()}:{line} imports {name}"
        for path in production_files()
        if not path.is_relative_to(ROOT / MONGO_ADAPTER)
        for line, name in imported(path)
        if within(name, MONGO_DRIVER)
    ]
    assert broken == [], "MongoDB stays behind the store's ports:\n" + "\n".join(broken)


def test_a_function_level_and_a_relative_import_are_seen() -> None:
    """The reader itself: a lazy import inside a function and a relative one count."""
    source = "def late():\n    import pymongo\n\n    from .mongo import MongoStore\n"
    names = {name for _, name in imports_in(source, "timer_service.store")}
    assert {"pymongo", "timer_service.store.mongo.MongoStore"} <= names, names
