"""Refusals from the request head: a body that is not JSON (415), a Host the API does not
answer to (400, TIMER_ALLOWED_HOSTS)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.api_harness import Api, expect
from timer_service.api.guards import host_of, is_json_media_type
from timer_service.dev import banner
from timer_service.settings import LOOPBACK_HOSTS, Settings

JOB = json.dumps({"biz_type": "orders", "job_id": "j", "delay_ms": 60_000}).encode()


# -- JSON bodies only -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "application/json; charset=latin-1",
        "text/json",
    ],
)
async def test_a_body_that_is_not_declared_json_is_415(api: Api, content_type: str | None) -> None:
    before = await api.snapshot()
    headers = {} if content_type is None else {"content-type": content_type}
    response = await api.request("POST", "/v1/jobs", content=JOB, headers=headers)
    problem = expect(response, 415)
    assert problem["type"] == "/problems/unsupported-media-type", problem
    assert response.headers.get("connection") == "close", response.headers
    assert await api.snapshot() == before, "a refused body changed the store"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        'application/json;charset="UTF-8"',
        "application/merge-patch+json",
    ],
)
def test_json_media_types_are_recognised(content_type: str) -> None:
    assert is_json_media_type(content_type.encode()), content_type


async def test_every_body_endpoint_refuses_text_plain(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="j", delay_ms=60_000), 201)
    endpoints = [
        ("PUT", "/v1/biz-types/orders"),
        ("POST", "/v1/biz-types/orders/secret:rotate"),
        ("POST", "/v1/jobs:batch"),
        ("PATCH", "/v1/jobs/orders/j"),
        ("PUT", "/v1/schedules/orders/s"),
    ]
    headers = {"content-type": "text/plain"}
    for method, path in endpoints:
        response = await api.request(method, path, content=b'{"a": 1}', headers=headers)
        assert response.status_code == 415, f"{method} {path}: got {response.status_code}"


async def test_a_request_without_a_body_passes_whatever_its_content_type(api: Api) -> None:
    expect(await api.create(biz_type="orders", job_id="j", delay_ms=60_000), 201)
    plain = {"content-type": "text/plain"}
    expect(await api.request("GET", "/v1/jobs/orders/j", headers=plain), 200)
    expect(await api.request("DELETE", "/v1/jobs/orders/j", headers=plain), 200)
    empty = {**plain, "content-length": "0"}
    rotated = expect(
        await api.request("POST", "/v1/biz-types/orders/secret:rotate", headers=empty), 200
    )
    assert rotated["signing_secret"].startswith("whsec_"), rotated


# -- Host check -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "host", "status"),
    [
        ("localhost,127.0.0.1,::1", "localhost:8080", 200),
        ("localhost,127.0.0.1,::1", "127.0.0.1", 200),
        ("localhost,127.0.0.1,::1", "[::1]:8080", 200),
        ("localhost,127.0.0.1,::1", "evil.example:8080", 400),
        ("localhost,127.0.0.1,::1", "localhost.evil.example", 400),
        ("*.svc.cluster.local", "timer.jobs.svc.cluster.local:8080", 200),
        ("*.svc.cluster.local", "svc.cluster.local.evil", 400),
        ("*", "anything.example", 200),
    ],
)
async def test_the_host_header_is_checked(
    make_api: Callable[..., Any], allowed: str, host: str, status: int
) -> None:
    api = await make_api(allowed_hosts=allowed)
    response = await api.request("GET", "/v1/biz-types", headers={"host": host})
    if status == 200:
        expect(response, 200)
        return
    problem = expect(response, 400)
    assert problem["type"] == "/problems/unknown-host", problem
    expect(await api.request("GET", "/openapi.json", headers={"host": host}), 400)
    # Probes and Prometheus reach a pod by its IP: those paths answer any host.
    for path in ("/healthz", "/readyz", "/metrics"):
        response = await api.request("GET", path, headers={"host": host})
        assert response.status_code == 200, f"{path}: expected 200, got {response.status_code}"


def test_the_default_hosts_follow_the_listen_address() -> None:
    def hosts(**settings: Any) -> list[str] | None:
        return Settings(_env_file=None, **settings).with_default_hosts().allowed_host_list()  # type: ignore[call-arg]

    assert hosts() == list(LOOPBACK_HOSTS), "loopback: local names only"
    assert hosts(http_host="0.0.0.0") == ["*"], "any address (k8s): every host"
    assert hosts(http_host="0.0.0.0", allowed_hosts="timer.example") == ["timer.example"]
    assert Settings(_env_file=None).allowed_host_list() is None  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("header", "host"),
    [("Example.COM:80", "example.com"), ("[::1]:8080", "::1"), ("[::1]", "::1"), ("a", "a")],
)
def test_host_of_reads_names_and_ipv6_literals(header: str, host: str) -> None:
    assert host_of(header.encode()) == host, f"{header!r}: expected {host!r}"


def test_the_dev_banner_quotes_the_token_for_the_shell_to_expand() -> None:
    settings = Settings(_env_file=None, api_token="t")  # type: ignore[call-arg]
    text = banner(settings, "store", "queue")
    assert '-H "Authorization: Bearer $TIMER_API_TOKEN"' in text, text
    assert "'Authorization" not in text, text
