"""End-to-end callback ceiling: RabbitMQ (messages pre-published) -> broker -> fast receiver.

Jobs are created and claimed in the store and their messages published before
the broker starts; then the clock runs from `Broker.start()` until every
callback's outcome is counted and recorded. The receiver is a separate process
(bench/http_client_bench.py serve), so the CPU time measured here is the
broker's (plus its in-process store in the memory case).

    .venv/bin/python bench/callback_bench.py --store memory --jobs 20000 --runs 3
    .venv/bin/python bench/callback_bench.py --store secantus --jobs 5000 --runs 3

Prints callbacks/s and broker CPU µs per callback, medians of the runs. The design
target: >= 3,000 callbacks/s in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import make_store  # noqa: E402
from http_client_bench import start_receiver  # noqa: E402

from broker.app import Broker  # noqa: E402
from tests.support import AMQP_URL, SecantusServer, drop_topology  # noqa: E402
from timer_service.clock import SystemClock  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.model import BizType, second_of  # noqa: E402
from timer_service.queue.amqp import AmqpQueue  # noqa: E402
from timer_service.settings import Settings  # noqa: E402

BIZ = "bench"


async def one_run(
    kind: str, jobs: int, port: int, concurrency: int, secantus: SecantusServer | None
) -> tuple[float, float]:
    store = await make_store(kind, secantus)
    prefix = f"cbb{uuid.uuid4().hex[:8]}"
    queue = AmqpQueue(AMQP_URL, prefix)
    await queue.connect()
    try:
        await store.biz_types.put_biz_type(
            BizType(BIZ, f"http://127.0.0.1:{port}/cb", max_concurrency=concurrency)
        )
        now = int(time.time() * 1000)
        due = now - 500
        for start in range(0, jobs, 1000):
            batch = [
                NewJob(BIZ, f"j{i}", due, json.dumps({"i": i}))
                for i in range(start, min(jobs, start + 1000))
            ]
            await store.jobs.create_jobs(batch, now)
        claimed = await store.scan.claim_due(second_of(due), now, uuid.uuid4().hex, 1, now)
        assert len(claimed) == jobs, f"claimed {len(claimed)} of {jobs}"
        for start in range(0, jobs, 1000):
            await queue.publish(claimed[start : start + 1000])

        metrics = Metrics()
        settings = Settings(queue_prefix=prefix)  # type: ignore[call-arg]
        broker = Broker(settings, store, queue, metrics, SystemClock(), broker_id="bench")
        cpu0, t0 = time.process_time(), time.perf_counter()
        await broker.start()
        while True:  # every outcome counted, nothing left ready in the queue
            if delivered(metrics) >= jobs and not await queue.queue_depth(BIZ):
                break
            await asyncio.sleep(0.02)
        await wait_recorded(store, jobs)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        await broker.stop()
        return jobs / wall, cpu / jobs * 1e6
    finally:
        await queue.close()
        await drop_topology(prefix)
        if kind != "memory":
            await store.drop_database()
        await store.close()


def delivered(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "timer_callbacks_total", {"biz_type": BIZ, "outcome": "delivered"}
    )
    return value or 0.0


async def wait_recorded(store: Any, jobs: int) -> None:
    """The last outcome batch is persisted (spot-check the last job created)."""
    while True:
        job = await store.jobs.get_job(BIZ, f"j{jobs - 1}")
        if job is not None and job.state.value == "delivered":
            return
        await asyncio.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["memory", "secantus"], default="memory")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=256, help="biz max_concurrency")
    args = parser.parse_args()
    with ExitStack() as stack:
        receiver, port = start_receiver()
        stack.callback(receiver.wait)
        stack.callback(receiver.terminate)
        secantus = None
        if args.store == "secantus":
            secantus = SecantusServer()
            secantus.start()
            stack.callback(secantus.cleanup)
        results = []
        for _ in range(args.runs):
            result = asyncio.run(one_run(args.store, args.jobs, port, args.concurrency, secantus))
            print(
                f"  run: {result[0]:8.0f} callbacks/s {result[1]:6.0f} µs CPU/callback", flush=True
            )
            results.append(result)
        rate = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        print(
            f"{args.store}: {args.jobs} jobs, median of {args.runs}: {rate:.0f} callbacks/s, "
            f"{cpu:.0f} µs broker CPU per callback"
        )


if __name__ == "__main__":
    main()
