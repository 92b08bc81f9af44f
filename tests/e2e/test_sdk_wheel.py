"""The SDK's wheel, as a business team installs it: built from clients/python, installed
into a fresh virtualenv (its dependencies from the package index pip is configured with)
without any server dependency, importing alone there, and giving mypy --strict a
consumer's types. A build, a virtualenv and mypy take seconds: not the unit tier, where
tests/unit/test_sdk_imports.py checks what needs no wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.packaging]

ROOT = Path(__file__).resolve().parents[2]
SDK_PROJECT = ROOT / "clients" / "python"
SDK_DISTRIBUTION = "callback-timer-service-sdk"

# Top-level import names of the service's dependencies and of its other packages.
SERVER_MODULES = (
    "fastapi", "starlette", "uvicorn", "pymongo", "bson", "gridfs", "motor", "aio_pika",
    "aiormq", "pamqp", "aiohttp", "croniter", "prometheus_client", "pydantic_settings",
    "dotenv", "secantus", "wiredtiger", "daemon", "broker",
)  # fmt: skip
SDK_DEPENDENCIES = {"httpx", "pydantic"}
SERVER_DISTRIBUTIONS = {
    "pymongo", "aio-pika", "fastapi", "starlette", "uvicorn", "aiohttp", "croniter",
    "prometheus-client", "pydantic-settings", "secantusdb", "callback-timer-service",
}  # fmt: skip

# Run in a fresh interpreter: fails on the first import of a server module, then checks
# that only SDK modules of timer_service were loaded and that CallbackVerifier says what
# it is missing.
IMPORT_CHECK = f"""
import importlib.abc, sys

BLOCKED = {SERVER_MODULES!r}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"the SDK imported {{name}}", name=name)
        return None


sys.meta_path.insert(0, Blocker())

import timer_service.client
import timer_service.receiver
from timer_service.client import AsyncTimerClient, Job, TimerClient
from timer_service.receiver import Callback, InvalidSignature, verify_callback

loaded = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
assert not loaded, f"server modules loaded: {{loaded}}"
sdk = ("timer_service", "timer_service.client", "timer_service.receiver", "timer_service.signing")
service = sorted(
    m for m in sys.modules
    if m.startswith("timer_service") and not any(m == s or m.startswith(s + ".") for s in sdk)
)
assert not service, f"service modules loaded: {{service}}"
try:
    timer_service.receiver.CallbackVerifier
except ImportError as exc:
    assert "{SDK_DISTRIBUTION}[fastapi]" in str(exc), f"no install hint in {{exc}}"
else:
    raise AssertionError("CallbackVerifier loaded without FastAPI")
print("sdk imports alone:", timer_service.client.USER_AGENT)
"""

CONSUMER = """
from timer_service.client import TimerClient
from timer_service.receiver import verify_callback


def order_of(body: bytes, headers: dict[str, str]) -> str:
    callback = verify_callback(body, headers, ["new-secret", "old-secret"])
    reveal_type(callback)
    return callback.job_id


with TimerClient("http://timer.test", token="t") as timers:
    job = timers.get_job("orders", "order-42")
    reveal_type(job)
    reveal_type(job.due_at)
    reveal_type(timers.list_jobs())
"""
REVEALED = (
    'Revealed type is "timer_service.receiver.Callback"',
    'Revealed type is "timer_service.client.models.Job"',
    'Revealed type is "int"',
    'Revealed type is "typing.Iterator[timer_service.client.models.Job]"',
)


def clean_env() -> dict[str, str]:
    """This environment without what would let a child see the repository's sources."""
    hidden = ("PYTHONPATH", "PYTHONHOME", "MYPYPATH", "VIRTUAL_ENV")
    return {name: value for name, value in os.environ.items() if name not in hidden}


def run(*command: str | Path, cwd: Path, timeout_s: float = 180) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, (
        f"expected exit 0 from {' '.join(map(str, command))}, got {done.returncode}\n"
        f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    return done.stdout


def expected_wheel_files() -> set[str]:
    client = {
        f"timer_service/client/{p.name}" for p in (ROOT / "timer_service/client").glob("*.py")
    }
    modules = ("__init__.py", "py.typed", "receiver.py", "receiver_fastapi.py", "signing.py")
    return client | {f"timer_service/{name}" for name in modules}


def build_sdk_wheel(work: Path) -> Path:
    # From a copy with the links resolved, as in the sdist: the checkout gets no build/.
    source = work / "sdk-source"
    shutil.copytree(
        SDK_PROJECT,
        source,
        symlinks=False,
        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
    )
    dist = work / "dist"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source, cwd=work)
    [wheel] = dist.glob("*.whl")
    return wheel


def test_sdk_wheel_installs_alone_and_gives_mypy_its_types(tmp_path: Path) -> None:
    wheel = build_sdk_wheel(tmp_path)

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name == f"callback_timer_service_sdk-{version}-py3-none-any.whl", wheel.name
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if ".dist-info/" not in name}
    assert shipped == expected_wheel_files(), (
        f"unexpected {sorted(shipped - expected_wheel_files())}, "
        f"missing {sorted(expected_wheel_files() - shipped)}"
    )

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel, cwd=tmp_path)

    installed = run(
        python, "-c", "import importlib.metadata as m; print(*(d.name for d in m.distributions()))",
        cwd=tmp_path,
    ).split()  # fmt: skip
    names = {name.lower().replace("_", "-") for name in installed}
    assert SDK_DEPENDENCIES | {SDK_DISTRIBUTION} <= names, f"installed: {sorted(names)}"
    assert not names & SERVER_DISTRIBUTIONS, f"server dependencies installed: {sorted(names)}"
    assert "sdk imports alone: timer-service-sdk/" + version in run(
        python, "-c", IMPORT_CHECK, cwd=tmp_path
    )

    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "app.py").write_text(CONSUMER)
    checked = run(
        sys.executable, "-m", "mypy", "--strict", "--python-executable", python,
        "--cache-dir", tmp_path / "mypy-cache", "app.py",
        cwd=consumer,
    ).replace('"builtins.', '"')  # fmt: skip
    for revealed in REVEALED:
        assert revealed in checked, f"expected {revealed!r} from mypy, got:\n{checked}"
    assert "error:" not in checked and "Any" not in checked, f"mypy said:\n{checked}"
