"""The SDK stands alone: its modules import without any server dependency, and its
sources are the service's own modules. (Its wheel: tests/e2e/test_sdk_wheel.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.test_sdk_wheel import IMPORT_CHECK, ROOT, SDK_PROJECT, clean_env


def test_sdk_modules_import_without_any_server_dependency(tmp_path: Path) -> None:
    env = clean_env() | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"expected the SDK to import alone, got:\n{done.stderr}"


def test_sdk_links_point_at_the_service_modules() -> None:
    links = sorted((SDK_PROJECT / "timer_service").iterdir())
    assert links, f"expected the SDK's sources linked under {SDK_PROJECT / 'timer_service'}"
    for link in links:
        target = (ROOT / "timer_service" / link.name).resolve()
        assert link.is_symlink() and link.resolve() == target, f"{link} -> {target} expected"
