"""The SDK's `create_jobs`: results chunk by chunk as they come, a timeout that grows with
the chunk, and an interrupted batch that says what to resend (job ids fixed)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.unit.test_client import FakeServer, batch_reply, connect_error
from timer_service.client import BatchInterrupted
from timer_service.client.requests import BATCH_TIMEOUT_S_PER_ITEM


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


def items(n: int) -> list[dict[str, object]]:
    return [{"biz_type": "orders", "delay_ms": 60_000, "payload": i} for i in range(n)]


def test_results_come_chunk_by_chunk_as_iteration_reaches_them(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply)
    with server.client() as client:
        results = client.create_jobs(items(250), chunk_size=100)
        first = next(results)
        assert len(server.requests) == 1, "expected only the first chunk sent before the rest"
        assert first.job is not None and first.job.payload == 0, first
        rest = list(results)
    sizes = [len(body["jobs"]) for body in server.bodies()]
    assert sizes == [100, 100, 50], f"expected [100, 100, 50], got {sizes}"
    assert len(rest) == 249, len(rest)


def test_the_timeout_grows_with_the_chunk(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply)
    server.on("GET", "/v1/biz-types", httpx.Response(200, json={"items": []}))
    with server.client(timeout_s=10) as client:
        list(client.create_jobs(items(1500)))
        client.list_biz_types()
    seen = [server.requests[i].extensions["timeout"]["read"] for i in range(3)]
    expected = [10 + 1000 * BATCH_TIMEOUT_S_PER_ITEM, 10 + 500 * BATCH_TIMEOUT_S_PER_ITEM, 10]
    assert seen == pytest.approx(expected), f"expected {expected}, got {seen}"


def test_an_interrupted_batch_says_what_to_resend_with_its_job_ids(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", batch_reply, connect_error())
    received = []
    with server.client(max_attempts=2) as client:
        with pytest.raises(BatchInterrupted) as caught:
            for result in client.create_jobs(items(150), chunk_size=100):
                received.append(result)
    interrupted = caught.value
    assert len(received) == len(interrupted.results) == 100, (len(received), interrupted)
    sent = json.loads(server.requests[-1].content)["jobs"]
    assert interrupted.chunk == sent, "expected the failed chunk as it was sent"
    assert [item["payload"] for item in interrupted.chunk] == list(range(100, 150))
    retried = [json.loads(r.content)["jobs"] for r in server.requests[1:]]
    assert retried[0] == retried[1], "expected the retry to resend the same job ids"

    # Resending the chunk is safe: the same job ids, answered 200 by a real API.
    server.on("POST", "/v1/jobs:batch", batch_reply)
    with server.client() as client:
        again = list(client.create_jobs(interrupted.chunk))
    resent = json.loads(server.requests[-1].content)["jobs"]
    assert [i["job_id"] for i in resent] == [i["job_id"] for i in interrupted.chunk]
    assert len(again) == 50


async def test_the_async_client_is_interrupted_the_same_way(server: FakeServer) -> None:
    server.on("POST", "/v1/jobs:batch", connect_error())
    async with server.async_client(max_attempts=1) as client:
        with pytest.raises(BatchInterrupted) as caught:
            async for _ in client.create_jobs(items(3)):
                pass
    assert [item["payload"] for item in caught.value.chunk] == [0, 1, 2]
    assert all(item["job_id"] for item in caught.value.chunk)
    assert isinstance(caught.value.__cause__, httpx.ConnectError), caught.value.__cause__


def test_a_chunk_size_beyond_the_api_limit_is_refused(server: FakeServer) -> None:
    with server.client() as client, pytest.raises(ValueError, match="chunk_size"):
        list(client.create_jobs(items(1), chunk_size=1001))
