"""The store's CPU and commands per hot-path write of a fired job, stage by stage, on
SecantusDB.

One client in a loop drives the real MongoDB adapter (no daemon, no broker): jobs
are created in batches, each is rescheduled one second later (into a second of the
next bucket), then each is claimed, marked for sending and given its outcome,
`--batch` jobs per call (1: the low-rate case, where every fired job has its own
claim, mark and outcome write). The outcome is a delivery, or with `--outcome retry`
a failed attempt retried one second later (again a second of another bucket). The
server's CPU (from /proc) is read around each stage, and the commands the adapter
sends are counted (PyMongo's command monitoring): those do not depend on the
machine's load. What it depends on is printed: the bucket's indexes (each write
rewrites the job's entry in every index it is in), the batch size, and the store
server.

    .venv/bin/python bench/store_write_bench.py [--jobs 400] [--batch 1] [--runs 3]
        [--spacing-ms 40] [--outcome delivered|retry]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pymongo import AsyncMongoClient  # noqa: E402
from pymongo.monitoring import CommandListener, CommandStartedEvent  # noqa: E402

from bench._common import process_cpu_s  # noqa: E402
from tests.support import SecantusServer  # noqa: E402
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.model import Attempt, second_of  # noqa: E402
from timer_service.store.mongo import MongoStore  # noqa: E402

STAGES = ("create", "reschedule", "claim", "mark", "outcome")


def ref_of(c: Claimed) -> SendRef:
    # (A claim names its job's bucket since jobs stopped moving; before, its second did.)
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, due_at=c.due_at)
    return replace(ref, bucket=c.bucket) if hasattr(c, "bucket") else ref


class Commands(CommandListener):
    """The commands sent, by the stage they were sent in."""

    def __init__(self) -> None:
        self.stage = ""
        self.sent: Counter[str] = Counter()

    def started(self, event: CommandStartedEvent) -> None:
        if event.command_name not in ("hello", "isMaster", "ismaster", "ping", "endSessions"):
            self.sent[self.stage] += 1

    def succeeded(self, event: object) -> None:
        pass

    def failed(self, event: object) -> None:
        pass


async def one_run(
    server: SecantusServer, jobs: int, batch: int, spacing_ms: int, retry: bool
) -> tuple[dict[str, float], str]:
    assert server.proc is not None
    pid = server.proc.pid
    commands = Commands()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        server.url, tz_aware=True, event_listeners=[commands]
    )
    store = MongoStore(server.url, f"sw{uuid.uuid4().hex[:8]}", buckets=60, client=client)
    await store.setup()
    cost: dict[str, float] = {}
    wall: dict[str, float] = {}

    async def stage(name: str, work: Callable[[], Awaitable[None]]) -> None:
        commands.stage = name
        before, started = process_cpu_s(pid), time.perf_counter()
        await work()
        cost[name] = (process_cpu_s(pid) - before) * 1e3 / jobs
        wall[name] = (time.perf_counter() - started) * 1e3 / jobs
        cost[f"{name} commands"] = commands.sent[name] / jobs

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
                if retry:  # retried a second later: a second of the next bucket
                    failed = Attempt(1, now, 503, "HTTP 503", 3)
                    outcomes = [
                        Outcome(ref_of(c), OutcomeKind.RETRY, failed, c.next_attempt_at + 1000)
                        for c in got
                    ]
                else:
                    done = Attempt(1, now, 200, None, 3)
                    outcomes = [Outcome(ref_of(c), OutcomeKind.DELIVERED, done) for c in got]
                await store.outcomes.record_outcomes(outcomes, now)

        stages = (create, reschedule, claim, mark, outcome)
        for name, work in zip(STAGES, stages, strict=True):
            if name == "claim":
                # As the daemon: the seconds are listed and loaded before they are
                # claimed (a call per second, not per job; not counted in any stage).
                commands.stage = "load"
                first, last = second_of(min(due)), second_of(max(due))
                for entry in await store.scan.next_seconds(first, last, last - first + 1):
                    await store.scan.load_second(entry.second, 1)
            await stage(name, work)
        taken = sum(len(g) for g in claimed)
        assert taken == jobs, f"claimed {taken} of {jobs}"
        indexes = [ix["name"] async for ix in await store.layout.buckets[0].list_indexes()]
        cost["reschedule wall"] = wall["reschedule"]
        return cost, ", ".join(indexes)
    finally:
        await store.drop_database()
        await store.close()


async def run(jobs: int, batch: int, runs: int, spacing_ms: int, retry: bool) -> None:
    server = SecantusServer()
    server.start()
    try:
        results = []
        for _ in range(runs):
            cost, indexes = await one_run(server, jobs, batch, spacing_ms, retry)
            results.append(cost)
            print("  run: " + ", ".join(f"{k} {v:.2f}" for k, v in cost.items()) + " ms/job")
        outcome = "a retry one second later" if retry else "delivered"
        print(
            f"\n{jobs} jobs {spacing_ms} ms apart, {batch} per call, outcome {outcome}, "
            "SecantusDB 0.7.0b3, one client in a loop"
        )
        print(f"bucket indexes: {indexes}")
        print("| stage | store CPU per job (median of runs) | commands per job |\n|---|---|---|")
        for name in STAGES:
            cpu = statistics.median(r[name] for r in results)
            sent = statistics.median(r[f"{name} commands"] for r in results)
            print(f"| {name} | {cpu:.2f} ms | {sent:.2f} |")
        resched_wall = statistics.median(r["reschedule wall"] for r in results)
        print(f"| (reschedule: wall time per call, one at a time) | {resched_wall:.2f} ms |")
        fired = [r["claim"] + r["mark"] + r["outcome"] for r in results]
        fired_sent = [
            r["claim commands"] + r["mark commands"] + r["outcome commands"] for r in results
        ]
        print(
            f"| **claim + mark + outcome** | **{statistics.median(fired):.2f} ms** "
            f"| **{statistics.median(fired_sent):.2f}** |"
        )
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spacing-ms", type=int, default=40, help="40: 25 jobs per second")
    parser.add_argument("--outcome", choices=("delivered", "retry"), default="delivered")
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.batch, args.runs, args.spacing_ms, args.outcome == "retry"))


if __name__ == "__main__":
    main()
