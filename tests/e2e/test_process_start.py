"""How every process starts, seen from outside: `--help` and bad flags start nothing;
a process whose MongoDB is down says so in a JSON line per retry and still stops
at once, with 0, on SIGTERM; `dev`'s banner appears once its port accepts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.harness import BIN
from tests.support import SecantusServer, free_port, unique_name

pytestmark = pytest.mark.e2e

SERVICE_COMMANDS = [
    ["timer-service", "api"],
    ["timer-service", "daemon"],
    ["timer-service", "broker"],
    ["timer-service", "dev"],
    ["python", "-m", "daemon"],
    ["python", "-m", "broker"],
]


def command(argv: list[str]) -> list[str]:
    if argv[0] == "python":
        return [str(BIN / "python"), *argv[1:]]
    return [str(BIN / argv[0]), *argv[1:]]


@pytest.mark.parametrize("argv", SERVICE_COMMANDS, ids=" ".join)
def test_help_prints_the_usage_and_starts_nothing(argv: list[str]) -> None:
    done = subprocess.run(command([*argv, "--help"]), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout
    assert "TIMER_" in done.stdout, done.stdout  # where the settings come from
    assert done.stderr == "", done.stderr  # no log line: nothing started


@pytest.mark.parametrize("argv", SERVICE_COMMANDS, ids=" ".join)
def test_a_bad_flag_is_a_usage_error(argv: list[str]) -> None:
    done = subprocess.run(
        command([*argv, "--no-such-flag"]), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "unrecognized arguments: --no-such-flag" in done.stderr, done.stderr


def test_a_port_that_is_no_port_is_a_usage_error() -> None:
    done = subprocess.run(
        command(["timer-service", "api", "--port", "http"]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "not a port number: 'http'" in done.stderr, done.stderr


def json_lines(path: Path) -> list[dict[str, object]]:
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"not_json": line})
    return lines


def start_with_a_dependency_down(
    service: str, log_path: Path, **env: str
) -> subprocess.Popen[bytes]:
    full_env = {
        **os.environ,
        "TIMER_HTTP_PORT": str(free_port()),
        "TIMER_METRICS_PORT": str(free_port()),
        **env,
    }
    with log_path.open("wb") as out:
        return subprocess.Popen(
            command(["timer-service", service]), env=full_env, stdout=out, stderr=out
        )


def retries_then_sigterm(
    proc: subprocess.Popen[bytes], log_path: Path, dependency: str
) -> tuple[int, float]:
    """Wait for two retry lines about `dependency`, then SIGTERM: the exit code and how
    long the process took to stop."""
    try:
        deadline = time.monotonic() + 30
        retries: list[dict[str, object]] = []
        while len(retries) < 2:
            assert proc.poll() is None, f"exited:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"no retry lines:\n{log_path.read_text()}"
            time.sleep(0.2)
            retries = [
                line
                for line in json_lines(log_path)
                if line.get("event") == f"{dependency} not ready, retrying"
            ]
        assert "error" in retries[0], retries[0]
        assert [r["attempt"] for r in retries[:2]] == [1, 2], retries
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(10)
        return code, time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.mark.parametrize("service", ["api", "daemon", "broker"])
def test_with_mongodb_down_a_process_logs_each_retry_and_stops_on_sigterm(
    service: str, tmp_path: Path
) -> None:
    log_path = tmp_path / f"{service}.log"
    nobody = f"mongodb://127.0.0.1:{free_port()}/"
    proc = start_with_a_dependency_down(service, log_path, TIMER_MONGO_URL=nobody)
    code, took_s = retries_then_sigterm(proc, log_path, "store")
    assert code == 0, f"{service} exited {code}:\n{log_path.read_text()}"
    assert took_s < 3, f"{service} took {took_s:.1f} s to stop"
    lines = json_lines(log_path)
    assert all("not_json" not in line for line in lines), log_path.read_text()  # no traceback


@pytest.mark.parametrize("service", ["daemon", "broker"])
def test_with_rabbitmq_down_a_process_logs_each_retry_and_stops_on_sigterm(
    service: str, tmp_path: Path, secantus: SecantusServer
) -> None:
    log_path = tmp_path / f"{service}.log"
    proc = start_with_a_dependency_down(
        service,
        log_path,
        TIMER_MONGO_URL=secantus.url,
        TIMER_MONGO_DB=unique_name("start"),
        TIMER_AMQP_URL=f"amqp://guest:guest@127.0.0.1:{free_port()}/",
    )
    code, took_s = retries_then_sigterm(proc, log_path, "queue")
    assert code == 0, f"{service} exited {code}:\n{log_path.read_text()}"
    assert took_s < 3, f"{service} took {took_s:.1f} s to stop"


def test_dev_prints_its_banner_once_its_port_accepts() -> None:
    data_dir = tempfile.mkdtemp(prefix="timer-dev-")
    port = free_port()
    env = {**os.environ, "TIMER_SHUTDOWN_GRACE_S": "5"}
    for unset in ("TIMER_MONGO_URL", "TIMER_AMQP_URL", "TIMER_HTTP_PORT", "TIMER_DATA_DIR"):
        env.pop(unset, None)
    proc = subprocess.Popen(
        command(["timer-service", "dev", "--port", str(port), "--data-dir", data_dir]),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "listening on" in line:
                break
        else:
            raise AssertionError(f"dev exited with {proc.wait()} and no banner")
        assert f"http://127.0.0.1:{port}" in line, line  # the flags won over the defaults
        # Connected at the very moment the banner appears: no retry, no wait.
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        assert (Path(data_dir) / "store").is_dir()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(data_dir, ignore_errors=True)
