"""A burst through the SDK against an API that sheds load (issue 31, "Done when"): 2,000
creates at once through one `AsyncTimerClient`, the API's admission gate
(timer_service/api/admission.py) set to take 4 requests at a time and queue none, so most
tries are answered 503 + `Retry-After`. Every create must end created, once, and none
raise: the SDK waits what `Retry-After` asks and tries again within its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import dev_stack
from tests.support import Progress, unique_name
from timer_service.client import AsyncTimerClient, Job

pytestmark = pytest.mark.e2e

BURST = 2000
SHEDDING = {"TIMER_API_MAX_INFLIGHT": "4", "TIMER_API_ADMISSION_WAIT_MS": "0"}
DEADLINE_S = 240.0  # per call; the burst took 15-40 s on 2 busy cores


class StatusCounter(httpx.AsyncHTTPTransport):
    """Counts the answers the SDK got, 503s included (the client retries them unseen)."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: Counter[int] = Counter()
        self.shed_without_retry_after = 0
        self.retry_after: Counter[str] = Counter()
        self.latency_s: list[float] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = time.monotonic()
        response = await super().handle_async_request(request)
        self.latency_s.append(time.monotonic() - sent)
        self.statuses[response.status_code] += 1
        if response.status_code == 503:
            asked = response.headers.get("retry-after")
            self.retry_after[asked or "none"] += 1
            self.shed_without_retry_after += asked is None
        return response

    def summary(self) -> str:
        ordered = sorted(self.latency_s)
        p50, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]
        return (
            f"answers {dict(self.statuses)}, Retry-After {dict(self.retry_after)},"
            f" latency p50 {p50 * 1000:.0f} ms p99 {p99 * 1000:.0f} ms"
        )


async def test_a_burst_of_creates_through_one_client_all_land_while_the_api_sheds(
    tmp_path: Path, progress: Progress
) -> None:
    stack = dev_stack(
        str(tmp_path / "data"), TIMER_LOG_LEVEL="WARNING", TIMER_CANARY_INTERVAL_MS="0", **SHEDDING
    )
    await asyncio.to_thread(stack.start)
    biz = unique_name("burst")
    counter = StatusCounter()
    try:
        async with AsyncTimerClient(
            stack.api_url, transport=counter, retry_deadline_s=DEADLINE_S
        ) as timers:
            await timers.put_biz_type(biz, callback_url="http://127.0.0.1:9/never")

            async def create(i: int) -> Job:
                # Half with a job_id, half without: the SDK fixes one before the first try,
                # so a create retried after a lost answer is the same job.
                job_id = f"given-{i:04}" if i % 2 else None
                return await timers.create_job(
                    biz, delay_ms=3_600_000, payload={"i": i}, job_id=job_id
                )

            progress(f"{BURST} creates at once, API at {SHEDDING}")
            started = time.monotonic()
            jobs = await asyncio.gather(*(create(i) for i in range(BURST)))
            took_s = time.monotonic() - started
            progress(f"all answered in {took_s:.1f} s; {counter.summary()}")
            print(f"\n{BURST} creates in {took_s:.1f} s; {counter.summary()}")

            listed = [job async for job in timers.list_jobs(biz, page_size=1000)]
    finally:
        await asyncio.to_thread(stack.stop)

    ids = [job.job_id for job in jobs]
    assert len(set(ids)) == BURST, f"expected {BURST} distinct jobs, got {len(set(ids))}"
    assert sorted(job.payload["i"] for job in jobs if isinstance(job.payload, dict)) == list(
        range(BURST)
    )
    assert sorted(job.job_id for job in listed) == sorted(ids), (
        f"expected the {BURST} jobs created and no other, the store holds {len(listed)}"
    )
    assert counter.statuses[503] > 0, f"expected the API to shed some tries: {counter.statuses}"
    assert counter.shed_without_retry_after == 0, "every 503 of the gate carries Retry-After"
    unexpected = set(counter.statuses) - {200, 201, 503}
    assert not unexpected, f"expected only 200, 201 and 503, got {dict(counter.statuses)}"
