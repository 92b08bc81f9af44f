"""A leader daemon whose store goes silent for longer than its lease TTL steps down and
takes the lease again; every job due after must still be called back.

Written while chasing the freezes of the first chaos runs (the leader stopped claiming
after a store fault, 1,500 jobs left pending and dispatched). Their cause was the store
server's (tests/integration/test_store_abandoned_transaction.py); this guards the
step-down-and-retake path itself, which held.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.chaos.conftest import Chaos
from tests.chaos.test_chaos import put_biz
from tests.e2e.harness import now_ms
from tests.support import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

JOBS = 100
SPREAD_MS = 10_000
LEAD_MS = 3_000
STALL_S = 3.0  # longer than the deployment's lease TTL (2 s)


async def test_every_job_is_called_back_after_a_store_stall_longer_than_the_lease(
    chaos: Chaos,
) -> None:
    biz = unique_name("stall")
    async with httpx.AsyncClient(base_url=chaos.api_url, timeout=30) as api:
        await put_biz(api, biz, chaos.receiver.url)
        started_ms = now_ms() + LEAD_MS
        jobs = [
            {"biz_type": biz, "job_id": f"s{i:04}", "due_at": started_ms + i * SPREAD_MS // JOBS}
            for i in range(JOBS)
        ]
        r = await api.post("/v1/jobs:batch", json={"jobs": jobs})
        assert r.status_code == 200, r.text
    await asyncio.sleep(max(0, started_ms + 1000 - now_ms()) / 1000)
    chaos.progress(f"store silent for {STALL_S:g} s")
    chaos.store_proxy.set_mode("stall")
    await asyncio.sleep(STALL_S)
    chaos.store_proxy.set_mode("pass")
    expected = {str(job["job_id"]) for job in jobs}
    deadline = time.monotonic() + SPREAD_MS / 1000 + 60
    while time.monotonic() < deadline and not expected <= chaos.receiver.accepted_jobs():
        await asyncio.sleep(0.5)
    missing = sorted(expected - chaos.receiver.accepted_jobs())
    chaos.progress(f"{JOBS - len(missing)}/{JOBS} called back")
    assert missing == [], f"expected all {JOBS} called back, {len(missing)} never: {missing[:10]}"
