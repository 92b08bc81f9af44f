"""Dispatch lateness of the scan daemon: how long before (or after) its due moment
each job's message is confirmed by the queue.

Jobs are created live, in batches every 100 ms, each due 2.5 s after its
creation (inside the look-ahead, so the change stream / nudge path is what
loads them), at a steady rate of jobs due per second. For every job:

- lateness = publish confirm time - (next_attempt_at - claim_ahead_ms): how far
  behind its planned claim-ahead moment the daemon got it to the broker;
- "late for due" = publish confirm time > next_attempt_at: the broker could not
  have held it until its due moment (the one that matters for callbacks).

Run from the repository root:

    .venv/bin/python bench/dispatch_bench.py                 # all configurations
    .venv/bin/python bench/dispatch_bench.py --store memory --rates 500 --duration 5
    .venv/bin/python bench/dispatch_bench.py --queue memory   # in-process queue

The queue is real RabbitMQ (127.0.0.1:5672, publisher confirms) unless
`--queue memory`. Everything runs on this machine: the daemon and the job
producer in this process, SecantusDB in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.app import Daemon
from timer_service.clock import SystemClock
from timer_service.dispatch import Claimed
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
BIZ = "bench"
LEAD_MS = 2500  # each job is created this long before it is due
BATCH_EVERY_MS = 100


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Recorder:
    """Wraps a queue; notes when each publish was confirmed."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.confirmed: list[tuple[int, Claimed]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        await self.queue.publish(jobs)
        t = now_ms()
        self.confirmed.extend((t, job) for job in jobs)


def pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def make_queue(kind: str, prefix: str) -> Any:
    if kind == "memory":
        return MemoryQueue()
    from timer_service.queue.amqp import AmqpQueue

    queue = AmqpQueue(AMQP_URL, prefix)
    await queue.connect()
    return queue


async def drop_queue(kind: str, prefix: str) -> None:
    if kind == "memory":
        return
    import aio_pika

    from timer_service.queue.amqp import exchange_name, queue_name

    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.queue_delete(queue_name(prefix, BIZ))
    await channel.exchange_delete(exchange_name(prefix))
    await connection.close()


async def run_once(store: Any, queue_kind: str, rate: int, duration_s: float) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, queue_prefix=prefix, reconcile_after_ms=600_000
    )
    queue = Recorder(await make_queue(queue_kind, prefix))
    daemon = Daemon(settings, store, queue, Metrics(), SystemClock())
    await daemon.start()
    while not daemon.is_leader:
        await asyncio.sleep(0.01)

    per_batch = max(1, round(rate * BATCH_EVERY_MS / 1000))
    batches = int(duration_s * 1000 / BATCH_EVERY_MS)
    run = uuid.uuid4().hex[:6]
    write_ms: list[float] = []
    start = now_ms()
    expected = 0
    for b in range(batches):
        tick = start + b * BATCH_EVERY_MS
        delay = tick - now_ms()
        if delay > 0:
            await asyncio.sleep(delay / 1000)
        created = now_ms()
        jobs = [
            NewJob(
                BIZ, f"{run}-{b}-{i}", created + LEAD_MS + i * BATCH_EVERY_MS // per_batch, "null"
            )
            for i in range(per_batch)
        ]
        t0 = time.perf_counter()
        await store.jobs.create_jobs(jobs, created)
        write_ms.append((time.perf_counter() - t0) * 1000)
        expected += len(jobs)
    produced_s = (now_ms() - start) / 1000
    deadline = time.monotonic() + LEAD_MS / 1000 + 10
    while len(queue.confirmed) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await daemon.stop()
    await queue.close()
    await drop_queue(queue_kind, prefix)

    lateness = [t - (job.next_attempt_at - settings.claim_ahead_ms) for t, job in queue.confirmed]
    late_for_due = sum(1 for t, job in queue.confirmed if t > job.next_attempt_at)
    return {
        "expected": expected,
        "published": len({(j.job_id) for _, j in queue.confirmed}),
        "achieved_rate": expected / produced_s,
        "write_p50_ms": statistics.median(write_ms),
        "p50": statistics.median(lateness) if lateness else float("nan"),
        "p99": pct(lateness, 99) if lateness else float("nan"),
        "max": max(lateness) if lateness else float("nan"),
        "late_for_due": late_for_due,
    }


async def bench_store(
    kind: str, rates: Sequence[int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    rows = []
    server = None
    if kind == "secantus":
        from tests.support import SecantusServer

        server = SecantusServer()
        server.start()
    try:
        for rate in rates:
            runs = []
            for _ in range(args.runs):
                if kind == "memory":
                    from timer_service.store.memory import MemoryStore

                    store: Any = MemoryStore(buckets=60)
                else:
                    from timer_service.store.mongo import MongoStore

                    assert server is not None
                    store = MongoStore(
                        server.url,
                        f"bench{uuid.uuid4().hex[:8]}",
                        buckets=60,
                        retention_ms=86_400_000,
                    )
                await store.setup()
                runs.append(await run_once(store, args.queue, rate, args.duration))
                if kind == "secantus":
                    await store.drop_database()
                await store.close()
            row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            row.update(store=kind, rate=rate, runs=len(runs))
            rows.append(row)
            print_row(row, args.queue)
    finally:
        if server is not None:
            server.cleanup()
    return rows


HEADER = (
    f"{'store':<9} {'queue':<8} {'target/s':>8} {'made/s':>7} {'write p50':>9} "
    f"{'published':>11} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'late for due':>12}"
)


def print_row(row: dict[str, Any], queue: str) -> None:
    print(
        f"{row['store']:<9} {queue:<8} {row['rate']:>8} {row['achieved_rate']:>7.0f} "
        f"{row['write_p50_ms']:>7.1f}ms {int(row['published']):>5}/{int(row['expected']):<5} "
        f"{row['p50']:>7.1f} {row['p99']:>7.1f} {row['max']:>7.1f} {int(row['late_for_due']):>12}",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "secantus", "all"], default="all")
    parser.add_argument("--queue", choices=["amqp", "memory"], default="amqp")
    parser.add_argument("--rates", type=int, nargs="*", help="jobs due per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per run")
    parser.add_argument("--runs", type=int, default=1, help="runs per point (medians shown)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    print(
        "lateness = publish confirmed - (next_attempt_at - claim_ahead 1000 ms); "
        "negative = ahead of plan"
    )
    print("late for due = confirmed after next_attempt_at (broker could not hold it to due)")
    print(HEADER)
    if args.store in ("memory", "all"):
        await bench_store("memory", args.rates or [100, 500, 1000], args)
    if args.store in ("secantus", "all"):
        await bench_store("secantus", args.rates or [100, 500], args)


if __name__ == "__main__":
    asyncio.run(main())
