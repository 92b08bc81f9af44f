"""Registration load on `timer-service api` over SecantusDB: jobs created as fast as the
API takes them (batches of 100 and single creates, concurrently) while /healthz is
polled every 50 ms. Liveness must stay quick and nothing may fail with a 5xx.

The duration is short here (TIMER_LOAD_DURATION_S, default 20 s) to keep CI fast;
bench/api_load_bench.py runs the same load for longer, with jobs firing meanwhile.
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests.badinput.conftest import Api
from tests.badinput.loadgen import run_load, summary_line
from tests.support import Progress

pytestmark = pytest.mark.integration

DURATION_S = float(os.environ.get("TIMER_LOAD_DURATION_S", "20"))
MAX_HEALTH_P99_MS = 1000.0


async def test_healthz_stays_quick_under_registration_load(api: Api, progress: Progress) -> None:
    progress(f"registration load for {DURATION_S:g} s, /healthz polled every 50 ms")
    result = await run_load(api.url, api.biz_type, DURATION_S, run_id="load-test")
    progress(summary_line(result))
    print(f"\n{result.table('timer-service api on SecantusDB')}\n{summary_line(result)}")

    api.assert_running()
    assert result.jobs_created > 0, f"expected jobs created, got none:\n{result.table('')}"
    assert result.server_errors == 0, f"expected no 5xx, got:\n{result.table('')}"
    assert not result.errors, f"expected no transport errors, got:\n{result.table('')}"
    assert result.health_failures == 0, f"expected every /healthz 200:\n{result.table('')}"
    p99 = result.health_quantile_ms(0.99)
    assert p99 < MAX_HEALTH_P99_MS, (
        f"expected healthz p99 < {MAX_HEALTH_P99_MS:.0f} ms under load, got {p99:.1f} ms"
    )
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        listed = await client.get("/v1/jobs", params={"biz_type": api.biz_type, "limit": 1})
    assert listed.status_code == 200 and listed.json()["items"], listed.text
