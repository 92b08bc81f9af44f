"""Listing a biz type's jobs by state on SecantusDB: a rare state among many jobs.

What an operator runs after a dead-letter alert (`GET /v1/jobs?biz_type=..&state=dead`):
N jobs pending, 3 cancelled. Prints, as medians of 3: the biz type's cancelled jobs
(served by the per-bucket (biz_type, state, _id) merge), the same state listed across
all biz types (served by a walk of the locator, which reads every job until the page
fills), and the first page of 100 pending jobs.

    python bench/list_bench.py --jobs 20000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import make_store

from tests.support import secantus_server
from timer_service.jobs import NewJob
from timer_service.model import JobState
from timer_service.search import JobFilter


async def median_ms(call: Callable[[], Awaitable[Any]], runs: int = 3) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = await call()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times), result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    with secantus_server() as server:
        store = await make_store("secantus", server)
        now = int(time.time() * 1000)
        for first in range(0, args.jobs, 1000):
            await store.jobs.create_jobs(
                [
                    NewJob("orders", f"j{k:07}", now + 60_000 + k * 13, "null")
                    for k in range(first, min(args.jobs, first + 1000))
                ],
                now,
            )
        for k in (5, args.jobs // 2, args.jobs - 7):
            await store.jobs.cancel_job("orders", f"j{k:07}", now)
        cases = [
            ("biz type + state (bucket merge)", "orders", JobState.CANCELLED),
            ("state only (locator walk)", None, JobState.CANCELLED),
            ("biz type + state, first 100 of all pending", "orders", JobState.PENDING),
        ]
        print(f"{args.jobs:,} jobs of one biz type, 3 cancelled, SecantusDB")
        for label, biz, state in cases:
            ms, (items, _) = await median_ms(
                lambda biz=biz, state=state: store.console.search_jobs(
                    JobFilter(biz, frozenset({state})), 100, None
                )
            )
            print(f"  {label:<45} {len(items):>4} items  {ms:>8.0f} ms", flush=True)
        await store.drop_database()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
