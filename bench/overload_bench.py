"""A burst of concurrent creates on the split processes (`api`, `daemon`, `broker`,
RabbitMQ, SecantusDB): answered/s, 201 vs 503/429, answer times, the API's RSS before
and after, and how often the daemon's lease changed hands. Median of --runs runs.

    .venv/bin/python bench/overload_bench.py [--creates 5000] [--runs 3] [--max-inflight 64]

Each run starts a fresh stack on its own database. "answer time" is from a request's
last byte sent to its answer; "since burst" from the moment the burst began, which
adds this one client process opening all the connections (docs/operations.md,
"Overload").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.badinput.burst import fire_burst, lease_fence, rss_mb  # noqa: E402
from tests.e2e.conftest import split_stack  # noqa: E402
from tests.e2e.harness import Receiver  # noqa: E402
from tests.e2e.test_stress_overload import lease_changes  # noqa: E402
from tests.support import SecantusServer, secantus_server  # noqa: E402

BIZ = "burst"
DELIVERY_TIMEOUT_S = 180.0


async def one_run(
    server: SecantusServer, creates: int, max_inflight: int, run: int
) -> dict[str, float]:
    url = server.url
    receiver = Receiver()
    await receiver.start()
    stack = split_stack(
        server,
        TIMER_LOG_LEVEL="WARNING",
        TIMER_LEASE_TTL_MS="5000",
        TIMER_API_MAX_INFLIGHT=str(max_inflight),
    )
    stack.start()
    try:
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as client:
            await client.put(f"/v1/biz-types/{BIZ}", json={"callback_url": receiver.url})
        db = stack.env["TIMER_MONGO_DB"]
        fence_before = lease_fence(url, db)
        api = stack.services["api"]
        assert api.proc is not None
        rss_before = rss_mb(api.proc.pid)
        burst = await fire_burst(stack.api_url, BIZ, creates, delay_ms=3000, run_id=f"r{run}")
        rss_after = rss_mb(api.proc.pid)
        lost = 0
        try:
            await receiver.wait_for(burst.created, DELIVERY_TIMEOUT_S)
        except AssertionError:
            lost = len(burst.created - {a.job_id for a in receiver.arrivals})
        fence_after = lease_fence(url, db)
        changes = lease_changes(stack.services["daemon"].metrics())
        statuses = burst.statuses
        print(f"run {run}: {burst.summary()}; API RSS {rss_before:.0f} -> {rss_after:.0f} MB;"
              f" lease fence {fence_before} -> {fence_after}, changes {changes};"
              f" 201s not delivered {lost}")  # fmt: skip
        return {
            "answered/s": burst.answered_per_s,
            "201": statuses.get(201, 0),
            "503": statuses.get(503, 0),
            "429": statuses.get(429, 0),
            "errors": sum(burst.errors.values()),
            "answer p50 s": burst.quantile_s(0.5),
            "answer p99 s": burst.quantile_s(0.99),
            "answer max s": burst.max_s,
            "since burst max s": burst.max_since_burst_s,
            "API RSS before MB": rss_before,
            "API RSS after MB": rss_after,
            "lease changes": float((fence_after or 0) - (fence_before or 0)),
            "201s not delivered": lost,
        }
    finally:
        stack.stop()
        await receiver.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-inflight", type=int, default=64)
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; SecantusDB store,"
        f" RabbitMQ, 1 api + 1 daemon + 1 broker; TIMER_API_MAX_INFLIGHT={args.max_inflight}"
    )
    with secantus_server() as server:
        runs = [await one_run(server, args.creates, args.max_inflight, n) for n in range(args.runs)]
    print(f"\n{args.creates} concurrent creates, median of {len(runs)} runs (min - max):")
    for key in runs[0]:
        values = [r[key] for r in runs]
        median = statistics.median(values)
        print(f"  {key:<20} {median:>10.2f}   ({min(values):.2f} - {max(values):.2f})")


if __name__ == "__main__":
    asyncio.run(main())
