"""What the endpoint answered on each attempt, through the real processes (split: api,
daemon and broker over SecantusDB and RabbitMQ; dev): the answers come over the wire,
are written with the outcomes, and read back on GET of the job (docs/api.md,
"Attempt responses"); secrets echoed back are never kept."""

from __future__ import annotations

import httpx
import pytest
from aiohttp import web

from tests.e2e.conftest import Stack
from tests.e2e.harness import Arrival, Receiver, wait_job_state
from tests.support import unique_name

pytestmark = pytest.mark.e2e

SECRET = "whsec_" + "c2VjcmV0LWZvci1hbnN3ZXJzLWUyZQ=="
LONG = "é" * 1500  # 3000 bytes of UTF-8


def answer(arrival: Arrival) -> web.Response:
    if arrival.attempt == 1:
        return web.Response(
            status=503,
            text="warming up",
            headers={"Set-Cookie": "session=s3cret-cookie", "Retry-After": "0"},
        )
    if arrival.attempt == 2:  # a debugging endpoint that echoes what it got
        echoed = {"signature": arrival.headers["webhook-signature"], "secret": SECRET}
        return web.json_response(echoed, status=500)
    if arrival.attempt == 3:
        return web.Response(status=502, text=LONG, headers={"X-Request-Id": "req-3"})
    return web.Response(status=200, body=b"\x89PNG\r\n\x1a\n\x00", content_type="image/png")


async def test_each_attempt_s_answer_is_kept_on_the_job(
    stack: Stack, api: httpx.AsyncClient, receiver: Receiver
) -> None:
    biz = unique_name("answers")
    config = {
        "callback_url": receiver.url,
        "signing_secret": SECRET,
        "retry": {"max_attempts": 4, "initial_backoff_ms": 100, "max_backoff_ms": 200},
    }
    r = await api.put(f"/v1/biz-types/{biz}", json=config)
    assert r.status_code == 201, r.text
    receiver.respond = answer
    r = await api.post("/v1/jobs", json={"biz_type": biz, "job_id": "j1", "delay_ms": 0})
    assert r.status_code == 201, r.text

    job = await wait_job_state(api, biz, "j1", {"delivered", "dead"}, timeout_s=60)
    assert job["state"] == "delivered", job
    statuses = [a["status_code"] for a in job["history"]]
    assert statuses == [503, 500, 502, 200], statuses
    first, echo, long, last = (a["response"] for a in job["history"])

    assert first["body"] == "warming up" and not first["truncated"], first
    assert first["headers"]["Retry-After"] == "0", first
    assert "Set-Cookie" not in first["headers"], "only allow-listed headers are kept"

    signature = receiver.by_job()["j1"][1].headers["webhook-signature"]
    shown = str(echo)
    for value in (SECRET, SECRET.removeprefix("whsec_"), signature, signature[3:]):
        assert value not in shown, f"{value!r} kept: {shown}"
    assert echo["body"].count("[redacted]") == 2, echo

    assert long["headers"]["X-Request-Id"] == "req-3", long
    assert long["truncated"] and long["body"] == "é" * 512, len(long["body"])

    assert (last["binary"], last["body"]) == (True, None), last
    assert last["headers"]["Content-Type"] == "image/png", last

    page = (await api.get("/v1/jobs", params={"biz_type": biz})).json()
    assert all("response" not in a for a in page["items"][0]["history"]), page
