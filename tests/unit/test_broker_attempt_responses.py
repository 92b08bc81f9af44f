"""The broker keeps what each attempt's endpoint answered: the sender reads the body's
first bytes and the headers off the wire, and the job's history carries them,
written with the outcome it belongs to (no store call of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import bson
import pytest
from aiohttp import web

from broker.callback import CallbackRequest, Verdict, attempt_record
from broker.sender import MAX_RESPONSE_BYTES, Sender
from tests.unit.broker_harness import Received, World, fast_retry, wait_for_states
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import SystemClock
from timer_service.dispatch import OutcomeKind
from timer_service.model import JobState
from timer_service.responses import BODY_BYTES, CAPTURE_BYTES

REQUEST = CallbackRequest(b'{"x":1}', {"Content-Type": "application/json"})


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    closing = asyncio.Event()

    async def big(request: web.Request) -> web.StreamResponse:
        # Chunked, longer than the sender ever reads: it must stop, not hang or fail.
        resp = web.StreamResponse(status=503, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        for _ in range(40):
            await resp.write(b"y" * 4096)
        await resp.write_eof()
        return resp

    async def small(request: web.Request) -> web.Response:
        return web.Response(
            status=429,
            body=b'{"error":"slow down"}',
            headers={"Content-Type": "application/json", "Retry-After": "7", "Set-Cookie": "a=b"},
        )

    async def stalls(request: web.Request) -> web.StreamResponse:
        # The status and the body's start, then nothing: the body never ends.
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await resp.write(b"accepted, ")
        await closing.wait()  # until the test ends
        return resp

    app = web.Application()
    app.router.add_post("/big", big)
    app.router.add_post("/stalls", stalls)
    app.router.add_post("/small", small)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    closing.set()
    await runner.cleanup()


async def post(url: str, timeout_s: float = 5) -> Any:
    sender = Sender(SystemClock(), TargetPolicy())
    await sender.start()
    try:
        return await sender.post(url, REQUEST, timeout_s=timeout_s)
    finally:
        await sender.close()


async def test_the_sender_hands_over_a_small_answer_whole(endpoint: str) -> None:
    got = await post(f"{endpoint}/small")
    assert (got.status_code, got.retry_after) == (429, "7")
    assert got.body == b'{"error":"slow down"}'
    assert got.complete
    assert ("Retry-After", "7") in got.headers


async def test_the_sender_reads_only_the_start_of_a_long_answer(endpoint: str) -> None:
    got = await post(f"{endpoint}/big")
    assert got.status_code == 503
    assert got.body == b"y" * CAPTURE_BYTES
    assert not got.complete, "40 chunks of 4 KiB came: more than what was read"
    assert 40 * 4096 > MAX_RESPONSE_BYTES


async def test_a_body_slower_than_its_status_does_not_turn_a_2xx_into_a_timeout(
    endpoint: str,
) -> None:
    got = await post(f"{endpoint}/stalls", timeout_s=3)
    assert (got.status_code, got.error) == (200, None), got
    assert got.body == b"accepted, " and not got.complete


async def test_attempt_three_s_answer_is_on_the_job(world: World) -> None:
    await world.put_biz("orders", retry=fast_retry())

    def answer(record: Received) -> tuple[int, dict[str, str], float]:
        attempt = record.json["attempt"]
        if attempt < 4:
            return 500, {"Content-Type": "text/plain", "X-Request-Id": f"r{attempt}"}, 0.0
        return 200, {"Content-Type": "application/json"}, 0.0

    def body(record: Received) -> bytes:
        attempt = record.json["attempt"]
        if attempt == 3:
            return ("db down: " + "é" * BODY_BYTES).encode()
        return f'{{"attempt":{attempt}}}'.encode()

    world.receiver.responder = answer
    world.receiver.body_for = body
    await world.broker.start()
    due = world.clock.now_ms() + 100
    jobs = await world.create("orders", ["j1"], due)
    world.daemon.watch([due])
    world.daemon.run(jobs)
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 5, world.clock)
    job = await world.store.jobs.get_job("orders", "j1")
    assert job is not None and job.state is JobState.DELIVERED, job
    assert [a.status_code for a in job.history] == [500, 500, 500, 200]
    third = job.history[2].response
    assert third is not None
    sent = len(("db down: " + "é" * BODY_BYTES).encode())
    assert dict(third.headers) == {
        "Content-Type": "text/plain",
        "Content-Length": str(sent),
        "X-Request-Id": "r3",
    }
    assert third.body is not None and third.body.startswith("db down: éé")
    assert len(third.body.encode()) <= BODY_BYTES and third.truncated
    last = job.history[3].response
    assert last is not None and last.body == '{"attempt":4}' and not last.truncated


async def test_header_bytes_that_are_not_utf8_are_kept_as_text_a_store_can_write() -> None:
    # aiohttp reads them as lone surrogates; BSON cannot encode those, and an outcome
    # that cannot be encoded would hold its batch for ever.
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(
            b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\n"
            b"X-Request-Id: r\xff\xfe1\r\nContent-Length: 5\r\n\r\nhello"
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        got = await post(f"http://127.0.0.1:{port}/cb")
    finally:
        server.close()
        await server.wait_closed()
    record = attempt_record(1, 1000, got, Verdict(OutcomeKind.RETRY, "HTTP 500", 2000), 1)
    assert record.response is not None
    assert dict(record.response.headers)["X-Request-Id"] == "r??1", record.response
    bson.encode(record.response.to_dict())
