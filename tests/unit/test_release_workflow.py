"""The release workflow (.github/workflows/release.yml), read as GitHub reads it: it builds
and checks both wheels and the image on every run, and publishes only on a pushed tag,
to PyPI by trusted publishing and the image to the registry IMAGE_NAME names. Nothing
here runs GitHub; the build steps were tried by hand (docs/operations.md, "Releasing")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ON_A_PUSHED_TAG = "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(loaded, dict)
    return loaded


def runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def uses(job: dict[str, Any]) -> list[str]:
    return [step["uses"] for step in job["steps"] if "uses" in step]


def test_it_runs_on_version_tags_and_reads_only_by_default(workflow: dict[Any, Any]) -> None:
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["push"] == {"tags": ["v*"]}, triggers
    assert workflow["permissions"] == {"contents": "read"}, workflow["permissions"]
    assert set(workflow["jobs"]) == {"wheels", "image", "publish-pypi", "publish-image"}


def test_both_wheels_are_built_checked_and_installed_alone(workflow: dict[Any, Any]) -> None:
    script = runs(workflow["jobs"]["wheels"])
    assert "--require-hashes -r requirements/build-lock.txt" in script
    assert "--wheel-dir dist .\n" in script and "--wheel-dir dist clients/python\n" in script
    assert 'twine" check --strict dist/*.whl' in script
    assert "dist/callback_timer_service-*.whl" in script
    assert "dist/callback_timer_service_sdk-*.whl" in script
    assert "mypy --strict --no-incremental sdk_consumer.py" in script
    for named in ("requirements/build-lock.txt", "tests/unit/sdk_consumer.py"):
        assert (ROOT / named).is_file(), f"the workflow uses {named}, which is gone"
    assert "actions/upload-artifact@v4" in uses(workflow["jobs"]["wheels"])


def test_the_commands_it_tries_in_the_wheel_exist(workflow: dict[Any, Any]) -> None:
    from timer_service.cli import build_parser

    tried = re.search(r"for command in ([a-z -]+); do", runs(workflow["jobs"]["wheels"]))
    assert tried is not None
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set(tried[1].split())
    assert commands <= set(subparsers.choices), commands - set(subparsers.choices)
    assert {"api", "daemon", "broker", "dev"} <= commands, commands


def test_the_version_check_accepts_this_version_and_refuses_another_tag(
    workflow: dict[Any, Any],
) -> None:
    steps = workflow["jobs"]["wheels"]["steps"]
    step = next(s for s in steps if "One version" in s.get("name", ""))
    program = step["run"].split("<<'PY'\n", 1)[1].rsplit("PY\n", 1)[0]
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None

    def check(ref: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GITHUB_REF": ref}
        return subprocess.run(
            [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True
        )

    assert check(f"refs/tags/v{version[1]}").returncode == 0
    assert check("refs/heads/main").returncode == 0
    refused = check("refs/tags/v999.0.0")
    assert refused.returncode == 1 and "is not v" in refused.stderr, refused


def test_the_image_is_built_and_tried_without_being_pushed(workflow: dict[Any, Any]) -> None:
    image = workflow["jobs"]["image"]
    build = next(s for s in image["steps"] if s.get("uses", "").startswith("docker/build-push"))
    assert build["with"]["load"] is True and "push" not in build["with"], build
    assert '--entrypoint id "$image" -u)" = 10001' in runs(image)


def test_pypi_gets_both_wheels_only_on_a_tag_by_trusted_publishing(
    workflow: dict[Any, Any],
) -> None:
    job = workflow["jobs"]["publish-pypi"]
    assert job["if"] == ON_A_PUSHED_TAG
    assert set(job["needs"]) == {"wheels", "image"}
    assert job["permissions"] == {"id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    publish = next(s for s in job["steps"] if "pypi-publish" in s.get("uses", ""))
    assert "password" not in publish.get("with", {}), "trusted publishing needs no token"


def test_the_image_is_pushed_only_on_a_tag_to_the_registry_named(
    workflow: dict[Any, Any],
) -> None:
    job = workflow["jobs"]["publish-image"]
    assert job["if"] == f"{ON_A_PUSHED_TAG} && vars.IMAGE_NAME != ''"
    assert set(job["needs"]) == {"wheels", "image"}
    assert job["env"]["IMAGE_NAME"] == "${{ vars.IMAGE_NAME }}"
    push = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push"))
    assert push["with"]["push"] is True
    assert push["with"]["tags"] == "${{ steps.meta.outputs.tags }}"
