"""Idle cost of the scan daemon with many jobs parked far ahead.

Parks `--jobs` jobs a year ahead, starts the daemon (leader, change stream on),
lets it settle, then measures over `--duration` seconds of idling:

- daemon CPU: process CPU time / wall time, in % of one core. With the
  in-memory store the store lives in this process too; with SecantusDB the
  server's own CPU is shown beside it (read from /proc);
- store calls by kind, counted by a wrapper around the store. The target is
  no `load_second` / `claim_due` at all: the daemon sleeps until the next
  non-empty second minus the look-ahead, waking only for lease renewals
  (every ttl/3) and a safety poll every 10 s.

    .venv/bin/python bench/idle_bench.py                       # both stores, 60 s each
    .venv/bin/python bench/idle_bench.py --store memory --jobs 100000 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import process_cpu_s
from daemon.app import Daemon
from timer_service.clock import SystemClock
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings
from timer_service.store.recording import recording

YEAR_MS = 365 * 86_400_000


async def park(store: Any, count: int) -> float:
    start = time.perf_counter()
    now = time.time_ns() // 1_000_000
    base = now + YEAR_MS
    batch = 1000
    for first in range(0, count, batch):
        await store.jobs.create_jobs(
            [
                NewJob("parked", f"p{i}", base + i * 7, "null")  # ~2 jobs per second, ~40 days
                for i in range(first, min(count, first + batch))
            ],
            now,
        )
    return time.perf_counter() - start


async def costs(
    work: Awaitable[object], server_pid: int | None
) -> tuple[float, float, float | None]:
    """Wall seconds, this process's CPU seconds and the store server's (if any) for `work`."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    server0 = process_cpu_s(server_pid) if server_pid else 0.0
    await work
    server = (process_cpu_s(server_pid) - server0) if server_pid else None
    return time.perf_counter() - wall0, time.process_time() - cpu0, server


async def measure(
    store: Any, jobs: int, duration_s: float, server_pid: int | None
) -> dict[str, Any]:
    park_s = await park(store, jobs)
    counting = recording(store)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    daemon = Daemon(settings, counting, MemoryQueue(), Metrics(), SystemClock())
    await daemon.start()
    while not daemon.is_leader:
        await asyncio.sleep(0.01)
    await asyncio.sleep(2)  # takeover: catch-up check, first window scan, first sweep
    counting.ops.clear()
    wall, cpu, server = await costs(asyncio.sleep(duration_s), server_pid)
    calls = {k: v for k, v in counting.ops.items() if k != "watch_seconds"}
    loaded = daemon.scanner.loaded_jobs
    # One timer_jobs_by_state sample (every TIMER_STATS_INTERVAL_S while leading): it
    # reads every open job, so its cost is reported on its own.
    sample_wall, sample_cpu, sample_server = await costs(daemon.sample_job_counts(), server_pid)
    sample = {
        "wall_ms": 1000 * sample_wall,
        "cpu_ms": 1000 * sample_cpu,
        "server_ms": None if sample_server is None else 1000 * sample_server,
    }
    await daemon.stop()
    return {
        "sample": sample,
        "park_s": park_s,
        "cpu_pct": 100 * cpu / wall,
        "server_pct": None if server is None else 100 * server / wall,
        "calls": calls,
        "loaded": loaded,
        "wall": wall,
    }


def report(kind: str, jobs: int, r: dict[str, Any]) -> None:
    calls = r["calls"]
    empty = calls.get("load_second", 0) + calls.get("claim_due", 0)
    server = "-" if r["server_pct"] is None else f"{r['server_pct']:.2f}%"
    print(
        f"{kind:<9} {jobs:>9,} {r['park_s']:>7.1f}s {r['wall']:>6.0f}s {r['cpu_pct']:>9.3f}% "
        f"{server:>10} {r['loaded']:>7} {empty:>12}   "
        + ", ".join(f"{k}={v}" for k, v in sorted(calls.items())),
        flush=True,
    )
    sample = r["sample"]
    server_ms = "" if sample["server_ms"] is None else f", store {sample['server_ms']:.0f} ms CPU"
    per_sample = sample["cpu_ms"] + (sample["server_ms"] or 0.0)
    print(
        f"{'':<9} one timer_jobs_by_state sample of {jobs:,} jobs: {sample['wall_ms']:.0f} ms, "
        f"daemon {sample['cpu_ms']:.0f} ms CPU{server_ms} "
        f"(= {per_sample / 3000:.2f} % of a core at the default 300 s interval)",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "secantus", "all"], default="all")
    parser.add_argument("--jobs", type=int, help="parked jobs (default 1,000,000 / 100,000)")
    parser.add_argument("--duration", type=float, default=60.0, help="idle seconds measured")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    print(
        f"{'store':<9} {'parked':>9} {'park in':>8} {'idle':>7} {'daemon CPU':>10} "
        f"{'store CPU':>10} {'in wheel':>7} {'load+claim':>12}   store calls while idle"
    )
    if args.store in ("memory", "all"):
        from timer_service.store.memory import MemoryStore

        jobs = args.jobs or 1_000_000
        store = MemoryStore(buckets=60)
        await store.setup()
        report("memory", jobs, await measure(store, jobs, args.duration, None))
        await store.close()
    if args.store in ("secantus", "all"):
        from tests.support import SecantusServer
        from timer_service.store.mongo import MongoStore

        jobs = args.jobs or 100_000
        server = SecantusServer()
        server.start()
        try:
            assert server.proc is not None
            mongo = MongoStore(
                server.url, f"idle{uuid.uuid4().hex[:8]}", buckets=60, retention_ms=86_400_000
            )
            await mongo.setup()
            report("secantus", jobs, await measure(mongo, jobs, args.duration, server.proc.pid))
            await mongo.drop_database()
            await mongo.close()
        finally:
            server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
