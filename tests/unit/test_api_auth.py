"""Bearer auth: named tokens, `request.state.actor`, the 401 sent before the body is read,
and the OpenAPI's bearer security scheme."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import Request
from pydantic import ValidationError
from starlette.types import Message

from tests.unit.api_harness import Api, expect
from timer_service.settings import Settings

TOKENS = {"api_tokens": "alice=tok-alice,ci=tok-ci", "api_token": "tok-default"}
OPEN_PATHS = ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def app_of(api: Api) -> Any:
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app


def add_whoami(api: Api) -> None:
    """A /v1 route that answers the actor the middleware put in the request's state."""

    async def whoami(request: Request) -> dict[str, str]:
        return {"actor": request.state.actor}

    app_of(api).add_api_route("/v1/whoami", whoami, methods=["GET"])
    app_of(api).add_api_route("/healthz-whoami", whoami, methods=["GET"])


@pytest.mark.parametrize(
    ("token", "actor"), [("tok-alice", "alice"), ("tok-ci", "ci"), ("tok-default", "default")]
)
async def test_each_named_token_authenticates_as_its_name(
    make_api: Callable[..., Any], token: str, actor: str
) -> None:
    api = await make_api(**TOKENS)
    add_whoami(api)
    got = expect(await api.request("GET", "/v1/whoami", headers=bearer(token)), 200)
    assert got == {"actor": actor}, f"expected actor {actor!r}, got {got}"
    expect(await api.request("GET", "/v1/biz-types", headers=bearer(token)), 200)


async def test_the_actor_is_anonymous_without_auth_or_outside_v1(
    make_api: Callable[..., Any],
) -> None:
    open_api = await make_api()
    add_whoami(open_api)
    got = expect(await open_api.request("GET", "/v1/whoami"), 200)
    assert got == {"actor": "anonymous"}, got
    closed = await make_api(**TOKENS)
    add_whoami(closed)
    got = expect(await closed.request("GET", "/healthz-whoami"), 200)
    assert got == {"actor": "anonymous"}, got


@pytest.mark.parametrize(
    "headers",
    [
        {},
        bearer("tok-nobody"),
        bearer("tok-alice "[:-1] + "x"),
        {"Authorization": "tok-alice"},
        {"Authorization": "Basic tok-alice"},
        {"Authorization": "Bearer"},
    ],
)
async def test_a_missing_or_wrong_token_is_401_and_connection_close(
    make_api: Callable[..., Any], headers: dict[str, str]
) -> None:
    api = await make_api(**TOKENS)
    problem = expect(await api.request("GET", "/v1/biz-types", headers=headers), 401)
    assert problem["type"] == "/problems/unauthorized", problem
    response = await api.request("POST", "/v1/jobs", json={}, headers=headers)
    expect(response, 401)
    assert response.headers.get("www-authenticate") == "Bearer", response.headers
    assert response.headers.get("connection") == "close", response.headers


@pytest.mark.parametrize("path", OPEN_PATHS)
async def test_health_metrics_and_docs_need_no_token(
    make_api: Callable[..., Any], path: str
) -> None:
    api = await make_api(**TOKENS)
    response = await api.request("GET", path)
    assert response.status_code == 200, f"{path}: expected 200, got {response.status_code}"


async def test_every_v1_route_is_refused_without_a_token(make_api: Callable[..., Any]) -> None:
    api = await make_api(**TOKENS)
    paths = (await api.request("GET", "/openapi.json")).json()["paths"]
    checked = 0
    for path, item in paths.items():
        if not path.startswith("/v1"):
            continue
        concrete = path.replace("{biz_type}", "orders").replace("{job_id}", "j")
        concrete = concrete.replace("{schedule_id}", "s")
        for method in item:
            response = await api.request(method.upper(), concrete)
            assert response.status_code == 401, (
                f"{method.upper()} {concrete}: expected 401, got {response.status_code}"
            )
            checked += 1
    assert checked >= 15, f"expected every /v1 operation checked, got {checked}"


async def test_the_401_is_sent_without_reading_the_body(make_api: Callable[..., Any]) -> None:
    """At the ASGI level: the app answers without ever calling `receive`."""
    api = await make_api(**TOKENS)
    reads = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"x" * 65536, "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/jobs",
        "raw_path": b"/v1/jobs",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"api"),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    await app_of(api)(scope, receive, send)
    assert sent and sent[0]["status"] == 401, f"expected a 401 start, got {sent[:1]}"
    assert reads == 0, f"expected the body unread, receive() was called {reads} times"


def test_named_tokens_are_parsed_and_bad_ones_refused() -> None:
    settings = Settings(_env_file=None, **TOKENS)  # type: ignore[call-arg]
    expected = {"alice": "tok-alice", "ci": "tok-ci", "default": "tok-default"}
    assert settings.named_tokens() == expected, settings.named_tokens()
    assert Settings(_env_file=None).named_tokens() == {}  # type: ignore[call-arg]
    for bad in ("alice", "alice=", "=tok", "a b=tok", "a=t1,a=t2", "a=t,b=t"):
        with pytest.raises(ValidationError):
            Settings(_env_file=None, api_tokens=bad)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="TIMER_API_TOKEN"):
        Settings(_env_file=None, api_token="t", api_tokens="default=u")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="TIMER_API_TOKEN"):
        Settings(_env_file=None, api_token="t", api_tokens="bob=t")  # type: ignore[call-arg]


async def test_the_openapi_has_a_bearer_scheme_on_every_v1_operation(api: Api) -> None:
    schema = (await api.request("GET", "/openapi.json")).json()
    scheme = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer"), scheme
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            security = operation.get("security")
            if path.startswith("/v1"):
                assert security == [{"bearerAuth": []}], f"{method} {path}: got {security}"
            else:
                assert security is None, f"{method} {path} should need no token: {security}"
