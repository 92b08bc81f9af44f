"""`timer-service jobs|biz-types ...` parsed by the real console script, run against a fake API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.unit.test_client import DUE_AT, FakeServer, biz_type_doc, job_doc, problem
from timer_service import cli, ops_cli
from timer_service.client import TimerClient


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    monkeypatch.setattr(ops_cli, "make_client", lambda: fake.client(token="tok"))
    return fake


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def requests_of(server: FakeServer) -> list[tuple[str, str, Any]]:
    return [
        (r.method, r.url.raw_path.decode(), body)
        for r, body in zip(server.requests, server.bodies(), strict=True)
    ]


def assert_json_output(out: str, expected: Any) -> None:
    got = json.loads(out)
    assert got == expected, f"expected {expected}, got {got}"


# --- jobs --------------------------------------------------------------------------------


def test_jobs_get_prints_the_job_as_json(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))

    code, out, err = run(capsys, "jobs", "get", "orders", "order-42")

    assert (code, err) == (0, "")
    assert_json_output(out, job_doc())
    assert server.requests[0].headers["authorization"] == "Bearer tok"


def test_jobs_get_table(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))

    code, out, _ = run(capsys, "jobs", "get", "orders", "order-42", "--table")

    header, row = out.splitlines()
    assert header.split() == list(ops_cli.JOB_COLUMNS), f"got header {header!r}"
    expected = ["orders", "order-42", "pending", "2026-01-01T00:00:00.000Z", "0",
                "2026-01-01T00:00:00.000Z", "-"]  # fmt: skip
    assert row.split() == expected, f"expected {expected}, got {row.split()}"
    assert code == 0


def test_jobs_list_follows_pages(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    pages = iter([
        {"items": [job_doc(job_id="a"), job_doc(job_id="b")], "next_cursor": "c1"},
        {"items": [job_doc(job_id="c", state="dead")], "next_cursor": None},
    ])  # fmt: skip
    server.on("GET", "/v1/jobs", lambda request: httpx.Response(200, json=next(pages)))

    argv = ("jobs", "list", "--biz-type", "orders", "--state", "dead", "--page-size", "2")
    code, out, _ = run(capsys, *argv)

    assert code == 0
    assert [job["job_id"] for job in json.loads(out)] == ["a", "b", "c"]
    got = [path for _, path, _ in requests_of(server)]
    expected = ["/v1/jobs?biz_type=orders&state=dead&limit=2",
                "/v1/jobs?biz_type=orders&state=dead&limit=2&cursor=c1"]  # fmt: skip
    assert got == expected, f"expected {expected}, got {got}"


def test_jobs_list_max_items_and_table(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    page = {"items": [job_doc(job_id=x) for x in "abc"], "next_cursor": "more"}
    server.on("GET", "/v1/jobs", httpx.Response(200, json=page))

    code, out, _ = run(capsys, "jobs", "list", "--max-items", "2", "--table")

    assert code == 0
    assert [line.split()[1] for line in out.splitlines()] == ["job_id", "a", "b"], out
    assert len(server.requests) == 1


def test_jobs_cancel(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    cancelled = job_doc(state="cancelled", next_attempt_at=None)
    server.on("DELETE", "/v1/jobs/orders/order-42", httpx.Response(200, json=cancelled))

    code, out, _ = run(capsys, "jobs", "cancel", "orders", "order-42")

    assert code == 0
    assert_json_output(out, cancelled)
    assert requests_of(server) == [("DELETE", "/v1/jobs/orders/order-42", None)]


@pytest.mark.parametrize(
    ("flags", "expected_body"),
    [
        (["--due-at", "2026-01-01T00:00:00Z"], {"due_at": "2026-01-01T00:00:00Z"}),
        (["--due-at", str(DUE_AT)], {"due_at": DUE_AT}),
        (["--delay-ms", "500", "--payload", '{"a": 1}'], {"delay_ms": 500, "payload": {"a": 1}}),
        (["--delay-ms", "0", "--payload", "null"], {"delay_ms": 0, "payload": None}),
    ],
)
def test_jobs_reschedule(
    server: FakeServer,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    expected_body: dict[str, Any],
) -> None:
    server.on("PATCH", "/v1/jobs/orders/order-42", httpx.Response(200, json=job_doc()))

    code, out, _ = run(capsys, "jobs", "reschedule", "orders", "order-42", *flags)

    assert code == 0
    assert_json_output(out, job_doc())
    assert requests_of(server) == [("PATCH", "/v1/jobs/orders/order-42", expected_body)]


def test_jobs_reschedule_needs_a_time(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["jobs", "reschedule", "orders", "order-42"])
    assert exited.value.code == 2
    assert server.requests == []


def test_jobs_replay(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("POST", "/v1/jobs/orders/order-42/replay", httpx.Response(200, json=job_doc()))

    code, out, _ = run(capsys, "jobs", "replay", "orders", "order-42")

    assert code == 0
    assert_json_output(out, job_doc())
    assert requests_of(server) == [("POST", "/v1/jobs/orders/order-42/replay", None)]


def test_an_api_error_prints_the_problem_on_stderr_and_exits_1(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("POST", "/v1/jobs/orders/order-42/replay", problem(409, "Conflict"))

    code, out, err = run(capsys, "jobs", "replay", "orders", "order-42")

    assert (code, out) == (1, "")
    assert_json_output(
        err, {"type": "about:blank", "title": "Conflict", "status": 409, "detail": "d"}
    )


def test_an_unreachable_service_exits_4(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("GET", "/v1/jobs/orders/order-42", httpx.ConnectError("refused"))

    code, out, err = run(capsys, "jobs", "get", "orders", "order-42")

    assert (code, out) == (4, "")
    assert "refused" in json.loads(err)["detail"]


# --- biz-types ---------------------------------------------------------------------------


def test_biz_types_list(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("GET", "/v1/biz-types", httpx.Response(200, json={"items": [biz_type_doc()]}))

    code, out, _ = run(capsys, "biz-types", "list")

    assert code == 0
    assert_json_output(out, [biz_type_doc()])


def test_biz_types_get_table(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("GET", "/v1/biz-types/orders", httpx.Response(200, json=biz_type_doc()))

    code, out, _ = run(capsys, "biz-types", "get", "orders", "--table")

    header, row = out.splitlines()
    assert header.split() == list(ops_cli.BIZ_TYPE_COLUMNS)
    expected = ["orders", "https://orders.internal/cb", "-", "1", "16", "10000", "False", "False"]
    assert row.split() == expected, f"expected {expected}, got {row.split()}"
    assert code == 0


def test_biz_types_put_with_flags(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("PUT", "/v1/biz-types/orders", httpx.Response(201, json=biz_type_doc()))

    code, out, _ = run(
        capsys, "biz-types", "put", "orders", "--callback-url", "https://orders.internal/cb",
        "--rate-limit-per-s", "100", "--burst", "10", "--max-concurrency", "32",
        "--timeout-ms", "5000", "--signing-secret", "s3cret", "--paused",
    )  # fmt: skip

    assert code == 0
    assert_json_output(out, biz_type_doc())
    expected = {"callback_url": "https://orders.internal/cb", "rate_limit_per_s": 100.0,
                "burst": 10, "max_concurrency": 32, "timeout_ms": 5000,
                "signing_secret": "s3cret", "paused": True}  # fmt: skip
    assert requests_of(server) == [("PUT", "/v1/biz-types/orders", expected)]


def test_biz_types_put_json_overridden_by_flags(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("PUT", "/v1/biz-types/orders", httpx.Response(200, json=biz_type_doc()))
    config = {"callback_url": "http://a/cb", "paused": True, "retry": {"max_attempts": 3}}

    code, _, _ = run(
        capsys, "biz-types", "put", "orders", "--json", json.dumps(config), "--no-paused"
    )

    assert code == 0
    expected = config | {"paused": False}
    assert requests_of(server) == [("PUT", "/v1/biz-types/orders", expected)]


def test_biz_types_put_refuses_json_that_is_not_an_object(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["biz-types", "put", "orders", "--json", "[1]"])
    assert exited.value.code == 2
    assert server.requests == []


def test_biz_types_delete(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("DELETE", "/v1/biz-types/orders", httpx.Response(204))

    assert run(capsys, "biz-types", "delete", "orders") == (0, "", "")
    assert requests_of(server) == [("DELETE", "/v1/biz-types/orders", None)]


# --- environment -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("http://127.0.0.1:8080", None)),
        (
            {"TIMER_API_URL": "http://timer:9000", "TIMER_API_TOKEN": "t"},
            ("http://timer:9000", "t"),
        ),
    ],
)
def test_make_client_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: tuple[str, str | None]
) -> None:
    made: list[tuple[str, str | None]] = []

    def fake_client(base_url: str, token: str | None = None) -> TimerClient:
        made.append((base_url, token))
        return TimerClient(base_url, token)

    monkeypatch.delenv("TIMER_API_URL", raising=False)
    monkeypatch.delenv("TIMER_API_TOKEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ops_cli, "TimerClient", fake_client)

    ops_cli.make_client().close()

    assert made == [expected], f"expected {[expected]}, got {made}"
