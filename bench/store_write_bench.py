"""The store's CPU per hot-path write of a fired job, stage by stage, on SecantusDB.

One client in a loop drives the real MongoDB adapter (no daemon, no broker): jobs
are created in batches, each is rescheduled one second later (into the next
bucket: the API's move, a transaction after a mark), then each is claimed, marked
for sending and given its outcome, `--batch` jobs per call (1: the low-rate case,
where every fired job has its own claim, mark and outcome write). The server's CPU
(from /proc) is read around each stage. What it depends on is printed: the bucket's indexes (each
write rewrites the job's entry in every index it is in), the batch size, and the
store server.

    .venv/bin/python bench/store_write_bench.py [--jobs 400] [--batch 1] [--runs 3]
        [--spacing-ms 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import process_cpu_s  # noqa: E402
from tests.support import SecantusServer  # noqa: E402
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.model import Attempt, second_of  # noqa: E402
from timer_service.store.mongo import MongoStore  # noqa: E402

STAGES = ("create", "reschedule", "claim", "mark", "outcome")


def ref_of(c: Claimed) -> SendRef:
    return SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, due_at=c.due_at)


async def one_run(
    server: SecantusServer, jobs: int, batch: int, spacing_ms: int
) -> tuple[dict[str, float], str]:
    assert server.proc is not None
    pid = server.proc.pid
    store = MongoStore(server.url, f"sw{uuid.uuid4().hex[:8]}", buckets=60)
    await store.setup()
    cost: dict[str, float] = {}
    wall: dict[str, float] = {}

    async def stage(name: str, work: Callable[[], Awaitable[None]]) -> None:
        before, started = process_cpu_s(pid), time.perf_counter()
        await work()
        cost[name] = (process_cpu_s(pid) - before) * 1e3 / jobs
        wall[name] = (time.perf_counter() - started) * 1e3 / jobs

    now = int(time.time() * 1000)
    base = now + 60_000
    due = [base + i * spacing_ms for i in range(jobs)]  # 1000 / spacing_ms per second
    groups = [range(i, min(i + batch, jobs)) for i in range(0, jobs, batch)]
    claimed: list[list[Claimed]] = []
    try:

        async def create() -> None:
            for start in range(0, jobs, 100):
                batch_jobs = [
                    NewJob("sw", f"j{i}", due[i], '{"order": 1}')
                    for i in range(start, min(start + 100, jobs))
                ]
                await store.jobs.create_jobs(batch_jobs, now)

        async def reschedule() -> None:
            for i in range(jobs):
                due[i] += 1000  # the next second: the next bucket
                await store.jobs.reschedule_job("sw", f"j{i}", due[i], None, now)

        async def claim() -> None:
            for n, g in enumerate(groups):
                # A claim is per second: a group that spans two is claimed in each.
                got: list[Claimed] = []
                for s in sorted({second_of(due[i]) for i in g}):
                    upto = min(due[g[-1]], s * 1000 + 999)
                    got += await store.scan.claim_due(s, upto, f"c{n}", 1, now + n)
                claimed.append(got)

        async def mark() -> None:
            for n, got in enumerate(claimed):
                await store.outcomes.start_sending([ref_of(c) for c in got], f"b/{n}", now)

        async def outcome() -> None:
            for got in claimed:
                done = Attempt(1, now, 200, None, 3)
                await store.outcomes.record_outcomes(
                    [Outcome(ref_of(c), OutcomeKind.DELIVERED, done) for c in got], now
                )

        stages = (create, reschedule, claim, mark, outcome)
        for name, work in zip(STAGES, stages, strict=True):
            await stage(name, work)
        taken = sum(len(g) for g in claimed)
        assert taken == jobs, f"claimed {taken} of {jobs}"
        indexes = [ix["name"] async for ix in await store.layout.buckets[0].list_indexes()]
        cost["reschedule wall"] = wall["reschedule"]
        return cost, ", ".join(indexes)
    finally:
        await store.drop_database()
        await store.close()


async def run(jobs: int, batch: int, runs: int, spacing_ms: int) -> None:
    server = SecantusServer()
    server.start()
    try:
        results = []
        for _ in range(runs):
            cost, indexes = await one_run(server, jobs, batch, spacing_ms)
            results.append(cost)
            print("  run: " + ", ".join(f"{k} {v:.2f}" for k, v in cost.items()) + " ms/job")
        print(
            f"\n{jobs} jobs {spacing_ms} ms apart, {batch} per call, "
            "SecantusDB 0.7.0b3, one client in a loop"
        )
        print(f"bucket indexes: {indexes}")
        print("| stage | store CPU per job (median of runs) |\n|---|---|")
        for name in STAGES:
            print(f"| {name} | {statistics.median(r[name] for r in results):.2f} ms |")
        resched_wall = statistics.median(r["reschedule wall"] for r in results)
        print(f"| (reschedule: wall time per call, one at a time) | {resched_wall:.2f} ms |")
        fired = [r["claim"] + r["mark"] + r["outcome"] for r in results]
        print(f"| **claim + mark + outcome** | **{statistics.median(fired):.2f} ms** |")
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spacing-ms", type=int, default=40, help="40: 25 jobs per second")
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.batch, args.runs, args.spacing_ms))


if __name__ == "__main__":
    main()
