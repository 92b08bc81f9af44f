"""What tripped operators up in `timer-service jobs|biz-types|schedules` (issue 31):
`--table` anywhere, `jobs create --label`, `... | head`, and an unreachable API.

The last two run the real console script in a subprocess: what they are about (a
traceback, retry lines on stderr) is what the user's terminal shows."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.unit.test_client import FakeServer, job_doc
from tests.unit.test_ops_cli import requests_of, run
from tests.unit.test_ops_cli import server as server  # the fixture
from timer_service import cli

ROOT = Path(__file__).resolve().parents[2]


# -- --table before the command, after it, or after the action -------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--table", "jobs", "get", "orders", "order-42"],
        ["jobs", "--table", "get", "orders", "order-42"],
        ["jobs", "get", "--table", "orders", "order-42"],
        ["jobs", "get", "orders", "order-42", "--table"],
    ],
)
def test_table_goes_anywhere(
    server: FakeServer, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, ""), err
    assert out.splitlines()[0].split()[:3] == ["biz_type", "job_id", "state"], out


def test_table_before_a_service_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--table", "api"])
    assert exit_.value.code == 2
    assert "--table" in capsys.readouterr().err


# -- jobs create --label ----------------------------------------------------------------


def created_job_body(server: FakeServer) -> dict[str, object]:
    [(method, path, body)] = requests_of(server)
    assert method == "POST" and path in ("/v1/jobs", "/v1/jobs:batch"), (method, path)
    item: dict[str, object] = body["jobs"][0] if path.endswith(":batch") else body
    return item


def test_jobs_create_sends_its_labels(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    labelled = job_doc(labels={"team": "billing", "note": "a=b"})
    server.on("POST", "/v1/jobs", httpx.Response(201, json=labelled))
    server.on(
        "POST",
        "/v1/jobs:batch",
        httpx.Response(200, json={"results": [{"status": 201, "job": labelled}]}),
    )

    argv = ["jobs", "create", "orders", "--delay-ms", "1000", "--label", "team=billing"]
    code, out, err = run(capsys, *argv, "--label", "note=a=b")

    assert (code, err) == (0, ""), err
    assert json.loads(out)["job_id"] == "order-42", out
    body = created_job_body(server)
    assert body["labels"] == {"team": "billing", "note": "a=b"}, body
    assert (body["biz_type"], body["delay_ms"]) == ("orders", 1000), body


def test_jobs_create_without_labels_sends_none(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("POST", "/v1/jobs", httpx.Response(201, json=job_doc()))
    assert run(capsys, "jobs", "create", "orders", "--delay-ms", "1")[0] == 0
    assert "labels" not in created_job_body(server)


def test_a_refused_labelled_create_prints_the_problem(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = {"type": "about:blank", "title": "Unprocessable", "status": 422, "detail": "bad key"}
    server.on("POST", "/v1/jobs", httpx.Response(422, json=refused))
    server.on(
        "POST",
        "/v1/jobs:batch",
        httpx.Response(200, json={"results": [{"status": 422, "error": refused}]}),
    )
    code, out, err = run(capsys, "jobs", "create", "orders", "--delay-ms", "1", "--label", "Bad=x")
    assert (code, out) == (1, ""), (code, out)
    assert json.loads(err)["detail"] == "bad key", err


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["team"], "expected key=value"),
        (["=billing"], "expected key=value"),
        (["team=a", "team=b"], "label 'team' given twice"),
    ],
)
def test_jobs_create_refuses_a_malformed_label(
    capsys: pytest.CaptureFixture[str], labels: list[str], expected: str
) -> None:
    argv = ["jobs", "create", "orders", "--delay-ms", "1"]
    for label in labels:
        argv += ["--label", label]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert expected in err, f"expected {expected!r} in {err!r}"


# -- the SDK's retry lines stay out of the CLI's output ----------------------------------


def test_an_unreachable_api_logs_no_retry_lines(
    server: FakeServer, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.ConnectError("refused"))
    with caplog.at_level(logging.DEBUG, logger="timer_service"):
        code, out, _ = run(capsys, "jobs", "get", "orders", "order-42")
    assert (code, out) == (4, "")
    assert len(server.requests) > 1, "the client should still retry"
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], f"retry lines logged: {noisy}"
    assert logging.getLogger("timer_service.client").level == logging.NOTSET, "left quiet"


# -- the real console script ---------------------------------------------------------------


def run_script(*argv: str, api_url: str, read_lines: int | None = None) -> tuple[int, str, str]:
    """`timer-service *argv` in a subprocess; with `read_lines`, its stdout is closed after
    that many lines, as `| head -n <read_lines>` does."""
    env = {**os.environ, "TIMER_API_URL": api_url, "PYTHONPATH": str(ROOT)}
    env.pop("TIMER_API_TOKEN", None)
    script = "import sys; from timer_service.cli import main; sys.exit(main())"
    process = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    if read_lines is None:
        out, err = process.communicate(timeout=30)
        return process.returncode, out, err
    out = "".join(process.stdout.readline() for _ in range(read_lines))
    process.stdout.close()  # the reader goes away
    err = process.stderr.read()
    return process.wait(timeout=30), out, err


@pytest.fixture
def long_listing() -> Iterator[str]:
    """An API that answers `GET /v1/jobs` with one page of 5,000 jobs (about 1.5 MB of
    JSON on the CLI's stdout, far beyond a pipe's buffer)."""
    page = json.dumps(
        {"items": [job_doc(job_id=f"j{i}") for i in range(5000)], "next_cursor": None}
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_piping_into_head_stops_quietly(long_listing: str) -> None:
    code, out, err = run_script("jobs", "list", api_url=long_listing, read_lines=3)
    assert out.splitlines() == ["[", "  {", '    "biz_type": "orders",'], out
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == "", f"expected nothing on stderr, got {err!r}"
    assert code == 141, f"expected 141 (128 + SIGPIPE, as other tools end), got {code}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_api_prints_one_clean_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    code, out, err = run_script("jobs", "get", "orders", "order-42", api_url=url)
    assert (code, out) == (4, ""), (code, out, err)
    problem = json.loads(err)  # one JSON document and nothing else: no retry lines
    assert problem["title"] == "timer service unreachable", problem
    assert url in problem["detail"] and "TIMER_API_URL" in problem["detail"], problem
