"""The console's heavy calls on SecantusDB: list, dry-run and bulk-replay N dead jobs.

Each run takes a fresh database, writes N dead jobs of one biz type directly into
the store's layout (bucket documents and locators, spread over 600 due seconds,
so over every bucket; far faster than killing them through the pipeline), then
times through the REST API (in process, over ASGI, so HTTP parsing is not timed):

- list: `GET /v1/jobs?biz_type=&state=dead&limit=1000`, every page;
- dry run: `POST /v1/jobs:bulk-replay` with `dry_run` (the count);
- bulk replay: the same for real, `limit` jobs per call, following `next_cursor`
  until null (the audit entry of each call included).

Prints the median of the runs and each run's figures.

    .venv/bin/python bench/console_bench.py [--jobs 10000] [--runs 3] [--limit 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import SecantusServer  # noqa: E402
from timer_service.api import create_app  # noqa: E402
from timer_service.clock import SystemClock  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.model import Attempt, BizType, Job, JobState, second_of  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.mongo import MongoStore  # noqa: E402
from timer_service.store.mongo.layout import job_to_doc, locator_doc  # noqa: E402

BIZ = "bench"


async def seed_dead(store: MongoStore, jobs: int, now_ms: int) -> None:
    layout = store.layout
    by_bucket: dict[int, list[dict[str, object]]] = {}
    locators = []
    for i in range(jobs):
        due = now_ms - 3_600_000 + (i % 600) * 1000
        job = Job(
            BIZ,
            f"job-{i:06d}",
            due,
            f'{{"n":{i}}}',
            JobState.DEAD,
            1,
            None,
            due - 1000,
            due + 50,
            last_error="HTTP 400",
            history=(Attempt(1, due + 3, 400, "HTTP 400", 4),),
            labels=(("tenant", f"t{i % 10}"),),
        )
        second = second_of(due)
        doc = job_to_doc(job, second)
        doc["expire_at"] = layout.expire_at(due + 50)
        by_bucket.setdefault(layout.bucket_no(second), []).append(doc)
        expire_at = layout.locator_expire_at(due + 50)
        loc = locator_doc(job, due - 1000, expire_at, layout.bucket_no(second))
        locators.append(loc)
    for start in range(0, len(locators), 1000):
        await layout.locator.insert_many(locators[start : start + 1000])
    for bucket, docs in by_bucket.items():
        await layout.buckets[bucket].insert_many(docs)


async def one_run(url: str, jobs: int, limit: int) -> dict[str, float]:
    store = MongoStore(url, f"console{uuid.uuid4().hex[:8]}", buckets=60)
    await store.setup()
    clock = SystemClock()
    try:
        await store.biz_types.put_biz_type(BizType(BIZ, "http://127.0.0.1:9/cb"))
        await seed_dead(store, jobs, clock.now_ms())
        settings = Settings(_env_file=None)  # type: ignore[call-arg]
        app = create_app(settings, store, Metrics(), clock)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            started = time.perf_counter()
            listed, cursor = 0, ""
            while True:
                page = await client.get(f"/v1/jobs?biz_type={BIZ}&state=dead&limit=1000{cursor}")
                page.raise_for_status()
                listed += len(page.json()["items"])
                if page.json()["next_cursor"] is None:
                    break
                cursor = f"&cursor={page.json()['next_cursor']}"
            list_s = time.perf_counter() - started
            assert listed == jobs, f"listed {listed} of {jobs}"

            body: dict[str, object] = {"filter": {"biz_type": BIZ, "state": "dead"}}
            started = time.perf_counter()
            dry = await client.post("/v1/jobs:bulk-replay", json={**body, "dry_run": True})
            dry_s = time.perf_counter() - started
            assert dry.json()["matched"] == jobs, dry.text

            started = time.perf_counter()
            changed, calls, next_cursor = 0, 0, None
            while True:
                call = {**body, "limit": limit}
                if next_cursor is not None:
                    call["cursor"] = next_cursor
                answer = await client.post("/v1/jobs:bulk-replay", json=call)
                answer.raise_for_status()
                calls += 1
                changed += answer.json()["changed"]
                next_cursor = answer.json()["next_cursor"]
                if next_cursor is None:
                    break
            replay_s = time.perf_counter() - started
            assert changed == jobs, f"replayed {changed} of {jobs}"
        return {"list_s": list_s, "dry_run_s": dry_s, "replay_s": replay_s, "calls": calls}
    finally:
        await store.drop_database()
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=500, help="jobs per bulk call")
    args = parser.parse_args()
    server = SecantusServer()
    server.start()
    try:
        runs = []
        for n in range(args.runs):
            result = await one_run(server.url, args.jobs, args.limit)
            runs.append(result)
            print(
                f"run {n + 1}: list {result['list_s']:.2f} s, dry run {result['dry_run_s']:.2f} s,"
                f" bulk replay {result['replay_s']:.2f} s in {result['calls']:.0f} calls",
                flush=True,
            )
    finally:
        server.cleanup()
    print(
        f"store: SecantusDB (one server process, 60 buckets); {args.jobs} dead jobs of one"
        f" biz type over 600 due seconds; bulk limit {args.limit}; median of {args.runs} runs"
    )
    for name in ("list_s", "dry_run_s", "replay_s"):
        value = statistics.median(r[name] for r in runs)
        label = {"list_s": "list (1000/page)", "dry_run_s": "dry run", "replay_s": "bulk replay"}
        print(f"  {label[name]:<18} {value:7.2f} s  ({args.jobs / value:,.0f} jobs/s)")


if __name__ == "__main__":
    asyncio.run(main())
