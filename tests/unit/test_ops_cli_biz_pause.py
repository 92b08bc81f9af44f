"""`timer-service biz-types pause|resume|patch` against the real API app: a signed,
rate-limited biz type paused and resumed keeps its secret and its limits, and its
callbacks stay signed (issue: a PUT with `--paused` used to strip both)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest

from broker.callback import build_request
from tests.unit.api_harness import NOW, Api, expect
from timer_service import cli, ops_cli
from timer_service.client import TimerClient
from timer_service.model import BizType, Job, JobState
from timer_service.receiver import verify_callback

WHSEC = "whsec_" + base64.b64encode(bytes(range(32))).decode()
SIGNED = {
    "callback_url": "http://127.0.0.1:9000/cb",
    "signing_secret": WHSEC,
    "rate_limit_per_s": 5.0,
    "burst": 3,
    "max_concurrency": 2,
}


class AppTransport(httpx.BaseTransport):
    """The blocking CLI's requests, answered by the API app on the test's event loop."""

    def __init__(self, api: Api, loop: asyncio.AbstractEventLoop) -> None:
        self.api = api
        self.loop = loop
        self.sent: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        answer = self.api.client.request(
            request.method, request.url.raw_path.decode(), content=request.read(),
            headers=dict(request.headers),
        )  # fmt: skip
        got = asyncio.run_coroutine_threadsafe(answer, self.loop).result(timeout=10)
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)


@pytest.fixture
async def transport(api: Api, monkeypatch: pytest.MonkeyPatch) -> AppTransport:
    expect(await api.request("PUT", "/v1/biz-types/signed", json=SIGNED), 201)
    app = AppTransport(api, asyncio.get_running_loop())
    monkeypatch.setattr(ops_cli, "make_client", lambda: TimerClient("http://api", transport=app))
    return app


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), f"timer-service {' '.join(argv)}: exit {code}, stderr {err}"
    return json.loads(out)


async def stored(api: Api) -> BizType:
    biz = await api.store.biz_types.get_biz_type("signed")
    assert biz is not None
    return biz


def callback_verifies(biz: BizType) -> bool:
    job = Job("signed", "j-1", NOW, "{}", JobState.DISPATCHED, 0, NOW, 0, 0)
    request = build_request(biz, job, 1, NOW)
    assert "webhook-signature" in request.headers, f"an unsigned callback: {request.headers}"
    verify_callback(request.body, request.headers, WHSEC, now_ms=NOW)
    return True


async def test_pause_and_resume_keep_the_secret_and_the_limits(
    api: Api, transport: AppTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    paused = await run_cli(capsys, "biz-types", "pause", "signed")

    assert (paused["paused"], paused["has_signing_secret"]) == (True, True), paused
    assert (paused["rate_limit_per_s"], paused["burst"], paused["max_concurrency"]) == (5.0, 3, 2)
    assert (await stored(api)).signing_secret == WHSEC

    resumed = await run_cli(capsys, "biz-types", "resume", "signed")

    assert (resumed["paused"], resumed["has_signing_secret"]) == (False, True), resumed
    assert (resumed["rate_limit_per_s"], resumed["burst"], resumed["max_concurrency"]) == (
        5.0,
        3,
        2,
    )
    assert callback_verifies(await stored(api))
    assert transport.sent == [("PATCH", "/v1/biz-types/signed")] * 2, transport.sent
    audit = expect(await api.request("GET", "/v1/audit?biz_type=signed"), 200)
    actions = [entry["action"] for entry in audit["items"]]
    assert actions.count("biz_type.patch") == 2 and "biz_type.put" in actions, actions


async def test_patch_changes_only_the_fields_it_names(
    api: Api, transport: AppTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    body = await run_cli(
        capsys, "biz-types", "patch", "signed", "--json", '{"burst": 9, "rate_limit_per_s": null}'
    )

    assert (body["burst"], body["rate_limit_per_s"], body["max_concurrency"]) == (9, None, 2)
    assert body["has_signing_secret"] is True, body


async def test_pausing_an_unknown_biz_type_exits_3(
    api: Api, transport: AppTransport, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await asyncio.to_thread(cli.main, ["biz-types", "pause", "nobody"])

    out, err = capsys.readouterr()
    assert (code, out) == (3, ""), (code, out)
    assert json.loads(err)["status"] == 404, err
    assert await api.store.biz_types.get_biz_type("nobody") is None
