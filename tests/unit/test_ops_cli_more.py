"""`timer-service jobs create`, `schedules ...`, `--version`, `--table` on either side of
the action, and the exit codes of "not found" (3) and "unreachable" (4)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.unit.test_client import FakeServer, job_doc, problem
from tests.unit.test_ops_cli import assert_json_output, requests_of, run
from tests.unit.test_ops_cli import server as server  # the fixture
from timer_service import __version__, cli

SCHEDULE = {
    "biz_type": "reports", "schedule_id": "daily", "cron": "0 9 * * *", "timezone": "UTC",
    "intervals_ms": None, "cycle": None, "payload": {"r": 1}, "start_at": None,
    "end_at": None, "max_runs": None, "paused": False, "catchup": "skip",
    "next_run_at": 1_767_258_000_000, "runs": 0, "last_run_at": None, "last_job_id": None,
}  # fmt: skip


def test_jobs_create_sends_the_body_with_a_job_id(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("POST", "/v1/jobs", httpx.Response(201, json=job_doc()))

    code, out, err = run(
        capsys, "jobs", "create", "orders", "--delay-ms", "60000", "--payload", '{"order": 42}'
    )

    assert (code, err) == (0, "")
    assert_json_output(out, job_doc())
    [(method, path, body)] = requests_of(server)
    assert (method, path) == ("POST", "/v1/jobs")
    assert body.pop("job_id"), "expected a generated job_id"
    assert body == {"biz_type": "orders", "delay_ms": 60000, "payload": {"order": 42}}, body


def test_jobs_create_needs_exactly_one_time(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["jobs", "create", "orders", "--job-id", "j"])
    assert exit_.value.code == 2


def test_schedules_put_get_list_delete(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "/v1/schedules/reports/daily"
    server.on("PUT", url, httpx.Response(201, json=SCHEDULE))
    server.on("GET", url, httpx.Response(200, json=SCHEDULE))
    server.on("GET", "/v1/schedules", httpx.Response(200, json={"items": [SCHEDULE]}))
    server.on("DELETE", url, httpx.Response(204))

    argv = ["schedules", "put", "reports", "daily", "--cron", "0 9 * * *"]
    code, out, _ = run(capsys, *argv, "--payload", '{"r": 1}', "--no-paused")
    assert code == 0 and json.loads(out)["schedule_id"] == "daily", out
    assert run(capsys, "schedules", "get", "reports", "daily")[0] == 0
    code, out, _ = run(capsys, "schedules", "list", "--biz-type", "reports", "--table")
    assert code == 0 and "daily" in out and "0 9 * * *" in out, out
    assert run(capsys, "schedules", "delete", "reports", "daily")[:2] == (0, "")
    put_body = requests_of(server)[0][2]
    assert put_body == {"cron": "0 9 * * *", "payload": {"r": 1}, "paused": False}, put_body
    assert server.requests[2].url.params.get("biz_type") == "reports"


def test_schedules_put_takes_intervals(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("PUT", "/v1/schedules/reports/every", httpx.Response(201, json=SCHEDULE))
    argv = ["schedules", "put", "reports", "every", "--intervals-ms", "1000,2000", "--cycle"]
    assert run(capsys, *argv)[0] == 0
    assert requests_of(server)[0][2] == {"intervals_ms": [1000, 2000], "cycle": True}


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "get", "orders", "order-42", "--table"],
        ["jobs", "--table", "get", "orders", "order-42"],
    ],
)
def test_table_before_or_after_the_action(
    server: FakeServer, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["biz_type", "job_id", "state"], out


def test_not_found_exits_3(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("GET", "/v1/schedules/reports/none", problem(404, "Not Found"))
    code, out, err = run(capsys, "schedules", "get", "reports", "none")
    assert (code, out) == (3, ""), (code, out)
    assert json.loads(err)["status"] == 404


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"timer-service {__version__}"
