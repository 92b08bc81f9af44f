"""The hashed lock files agree with pyproject.toml, and the image and CI install from them.

A dependency added or re-bounded in pyproject.toml without `requirements/refresh`
fails here, before an install that would either miss it or ignore the lock.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SELF = canonicalize_name(PROJECT["name"])

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\?$")


def pins(lock: str) -> dict[str, dict[str, int]]:
    """name -> {version: number of hashes} of every pinned requirement in a lock file (a
    universal lock pins some twice, for different Python versions, behind markers)."""
    found: dict[str, dict[str, int]] = {}
    current: tuple[str, str] | None = None
    for line in (LOCKS / lock).read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = (canonicalize_name(match.group(1)), match.group(2))
            found.setdefault(current[0], {})[current[1]] = 0
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            found[current[0]][current[1]] += 1
        elif line.strip() and not line.lstrip().startswith("#"):
            pytest.fail(f"{lock}: a line that is neither a pin nor a hash: {line!r}")
    return found


def requirements(*extras: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return [r for r in reqs if canonicalize_name(r.name) != SELF]


@pytest.mark.parametrize(
    ("lock", "extras"),
    [("lock.txt", ()), ("dev-lock.txt", ("test", "lint"))],
)
def test_every_dependency_is_pinned_within_its_bounds_with_hashes(
    lock: str, extras: tuple[str, ...]
) -> None:
    pinned = pins(lock)
    problems = []
    for req in requirements(*extras):
        name = canonicalize_name(req.name)
        if name not in pinned:
            problems.append(f"{req.name}: not in {lock}")
        for version in pinned.get(name, {}):
            if not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req.name}: {lock} pins {version}, outside {req.specifier}")
    unhashed = sorted(
        f"{name}=={version}"
        for name, versions in pinned.items()
        for version, hashes in versions.items()
        if hashes == 0
    )
    assert not unhashed, f"{lock}: pins without a hash: {unhashed}"
    assert not problems, "run requirements/refresh:\n" + "\n".join(problems)


def test_the_dev_lock_pins_the_runtime_as_the_image_does() -> None:
    runtime, dev = pins("lock.txt"), pins("dev-lock.txt")
    differ = {
        name: (sorted(versions), sorted(dev.get(name, {})))
        for name, versions in runtime.items()
        if set(versions) != set(dev.get(name, {}))
    }
    assert not differ, f"image vs CI versions (run requirements/refresh): {differ}"


def test_the_build_backend_is_pinned_where_builds_run_without_isolation() -> None:
    backend = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "build-system"]["requires"]]  # fmt: skip
    for lock in ("build-lock.txt", "dev-lock.txt"):
        pinned = pins(lock)
        for req in backend:
            versions = list(pinned.get(canonicalize_name(req.name), {}))
            assert versions and all(req.specifier.contains(v) for v in versions), (
                f"{lock}: {req} pinned as {versions}"
            )


def test_croniter_is_on_its_maintained_line() -> None:
    (version,) = pins("lock.txt")["croniter"]
    assert int(version.split(".")[0]) >= 6, f"croniter {version} predates the pallets-eco line"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("Dockerfile", "--require-hashes -r requirements/lock.txt"),
        ("Dockerfile", "--require-hashes -r requirements/build-lock.txt"),
        ("Dockerfile", "--no-deps --no-build-isolation"),
        (".ci/run", "--require-hashes \\\n    -r requirements/dev-lock.txt"),
        (".ci/test", "--require-hashes \\\n    -r requirements/dev-lock.txt"),
    ],
)
def test_image_and_ci_install_from_the_locks(path: str, expected: str) -> None:
    text = (ROOT / path).read_text()
    assert expected in text, f"{path} does not install with {expected!r}"
    unpinned = re.findall(r"pip install[^\n]*(?:-e '\.\[|-U pip)", text)
    assert not unpinned, f"{path} installs unpinned: {unpinned}"
