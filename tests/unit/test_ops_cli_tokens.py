"""`timer-service tokens create|list|delete`, parsed by the real console script, run
against a fake API with the server's shapes."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.unit.test_client import FakeServer
from tests.unit.test_ops_cli import requests_of, run, server
from timer_service.tokens_cli import TOKEN_COLUMNS

__all__ = ["server"]

LISTED = {
    "id": "tok_1", "name": "orders-team", "role": "producer",
    "biz_types": ["order-timeout", "refund-*"], "created_at": 1_767_225_600_000,
}  # fmt: skip
CREATED = {**LISTED, "token": "tmr_secret"}


def test_tokens_create_sends_the_body_and_prints_the_secret(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("POST", "/v1/tokens", httpx.Response(201, json=CREATED))
    argv = ("tokens", "create", "orders-team", "--role", "producer")
    code, out, err = run(capsys, *argv, "--biz-type", "order-timeout", "--biz-type", "refund-*")
    assert (code, err) == (0, ""), err
    assert json.loads(out) == CREATED, out
    body = {"name": "orders-team", "role": "producer", "biz_types": LISTED["biz_types"]}
    assert requests_of(server) == [("POST", "/v1/tokens", body)]


def test_tokens_create_refuses_an_unknown_role(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(capsys, "tokens", "create", "x", "--role", "root", "--biz-type", "a")
    assert exited.value.code == 2


def test_tokens_list_table_shows_no_secret(
    server: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.on("GET", "/v1/tokens", httpx.Response(200, json={"items": [LISTED]}))
    code, out, _ = run(capsys, "tokens", "list", "--table")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == list(TOKEN_COLUMNS), header
    assert row.startswith("tok_1") and "orders-team" in row and "tmr_" not in row, row


def test_tokens_delete(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.on("DELETE", "/v1/tokens/tok_1", httpx.Response(204))
    assert run(capsys, "tokens", "delete", "tok_1") == (0, "", "")
    assert requests_of(server) == [("DELETE", "/v1/tokens/tok_1", None)]
