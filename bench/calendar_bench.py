"""The load calendar's read: `GET /v1/calendar` for a day at one-minute steps.

In-memory store: 10 million jobs parked over `--days` days (every second of them
non-empty), for one or more partitions. Creating 10M jobs through the API takes
far longer than the query, so the counts and the index of non-empty seconds are
built directly, as the store's writes leave them (the counts per slot, per biz
type); a few thousand jobs are then created through the API on top, and the
calendar is checked against them, so the query path timed is the real one: the
HTTP route in-process (httpx over ASGI), the store's `due_by_second`, the sum per
step.

SecantusDB (`--secantus`): the cost of the MongoDB adapter's read is one index
entry per non-empty second (and partition) of the range, whatever the number of
jobs parked elsewhere; the entries of the range are written directly (`--entries`
of them, each as the store's bumps leave it) and the same route is timed, so the
figure for a full day (86,400 entries a partition) is extrapolated per entry.

    .venv/bin/python bench/calendar_bench.py [--jobs 10000000] [--days 10]
        [--partitions 1] [--runs 20] [--secantus] [--entries 1000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.support import SecantusServer  # noqa: E402
from timer_service.api import create_app  # noqa: E402
from timer_service.clock import FakeClock  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.partitions import slot  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.memory import MemoryStore  # noqa: E402
from timer_service.store.mongo import MongoStore  # noqa: E402

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_S = 86_400
BIZ = ("orders", "payments")  # 3:1


def park_directly(store: MemoryStore, jobs: int, days: int) -> int:
    """Counts for `jobs` pending jobs spread over `days` days from T0 + 1 h, every second
    and partition non-empty; the seconds index holds each slot. Returns the slots."""
    state = store.state
    first = T0 // 1000 + 3600
    seconds = days * DAY_S
    slots = seconds * state.partitions
    each, extra = divmod(jobs, slots)
    by_orders: dict[int, int] = {}
    by_payments: dict[int, int] = {}
    for p in range(state.partitions):
        base = slot(p, first)
        for i in range(seconds):
            n = each + (1 if p * seconds + i < extra else 0)
            at = base + i
            state.due[at] = n
            by_payments[at] = n // 4
            by_orders[at] = n - n // 4
            state.versions[at] = "0"
            state.named[at] = {(first + i) % state.buckets}
    state.due_by_biz = {"orders": by_orders, "payments": by_payments}
    state.sorted_seconds = sorted(state.versions)
    return slots


async def timed_day(client: httpx.AsyncClient, start_ms: int, runs: int, biz: str | None) -> Any:
    params: dict[str, Any] = {"from": start_ms, "to": start_ms + DAY_S * 1000, "step_ms": 60_000}
    if biz is not None:
        params["biz_type"] = biz
    cpu, wall, body = [], [], None
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        response = await client.get("/v1/calendar", params=params)
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
        assert response.status_code == 200, response.text
        body = response.json()
    return cpu, wall, body


def summary(name: str, cpu: list[float], wall: list[float]) -> str:
    return (
        f"{name}: CPU ms median {statistics.median(cpu):.1f} max {max(cpu):.1f};"
        f" wall ms median {statistics.median(wall):.1f} max {max(wall):.1f}"
    )


async def api_over(store: Any) -> tuple[httpx.AsyncClient, FakeClock]:
    clock = FakeClock(T0)
    app = create_app(Settings(), store, Metrics(), clock)  # type: ignore[call-arg]
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
    for biz in BIZ:
        put = await client.put(f"/v1/biz-types/{biz}", json={"callback_url": "http://127.0.0.1/"})
        assert put.status_code in (200, 201), put.text
    return client, clock


async def memory(args: argparse.Namespace) -> None:
    store = MemoryStore(buckets=60, partitions=args.partitions)
    t0 = time.perf_counter()
    slots = park_directly(store, args.jobs, args.days)
    print(
        f"in-memory store: {args.jobs:,} jobs parked over {args.days} days, "
        f"{args.partitions} partition(s), {slots:,} non-empty slots "
        f"(built in {time.perf_counter() - t0:.1f} s)"
    )
    client, _ = await api_over(store)
    day_ms = T0 + 2 * DAY_S * 1000  # a day fully inside the parked span
    before = await timed_day(client, day_ms, 1, None)
    real = 2000  # jobs created through the API into the measured day, on top
    for i in range(0, real, 500):
        jobs = [
            {"biz_type": "orders", "job_id": f"j{i + k}", "due_at": day_ms + (i + k) * 7_000}
            for k in range(500)
        ]
        batch = await client.post("/v1/jobs:batch", json={"jobs": jobs})
        assert batch.status_code == 200, batch.text
    cpu, wall, body = await timed_day(client, day_ms, args.runs, None)
    total = sum(b["due"] for b in body["buckets"])
    expected = sum(b["due"] for b in before[2]["buckets"]) + real
    assert total == expected, f"the calendar counted {total}, expected {expected}"
    print(f"  a day at one-minute steps: 1,440 buckets, {total:,} jobs due in it")
    print("  " + summary("all biz types", cpu, wall))
    cpu, wall, _ = await timed_day(client, day_ms, args.runs, "payments")
    print("  " + summary("biz_type=payments", cpu, wall))
    await client.aclose()


async def secantus(args: argparse.Namespace) -> None:
    server = SecantusServer()
    server.start()
    try:
        for entries in [int(e) for e in args.entries.split(",")]:
            store = MongoStore(server.url, f"calendar{entries}", buckets=60)
            await store.setup()
            first = T0 // 1000 + 3600
            docs = [
                {
                    "_id": first + i,
                    "v": "0",
                    "buckets": [(first + i) % 60],
                    "n": 4,
                    "by": {"orders": 3, "payments": 1},
                }
                for i in range(entries)
            ]
            for i in range(0, len(docs), 10_000):
                await store.layout.seconds.insert_many(docs[i : i + 10_000])
            client, _ = await api_over(store)
            start_ms = first * 1000
            params = {"from": start_ms, "to": start_ms + DAY_S * 1000, "step_ms": 60_000}
            cpu, wall = [], []
            server_cpu0 = server.cpu_s() if hasattr(server, "cpu_s") else None
            for _ in range(args.runs):
                c0, w0 = time.process_time(), time.perf_counter()
                response = await client.get("/v1/calendar", params=params)
                cpu.append((time.process_time() - c0) * 1000)
                wall.append((time.perf_counter() - w0) * 1000)
                assert sum(b["due"] for b in response.json()["buckets"]) == 4 * entries
            del server_cpu0
            per_entry_us = statistics.median(wall) * 1000 / entries
            print(
                f"SecantusDB, {entries:,} non-empty seconds in the day: "
                + summary("all biz types", cpu, wall)
                + f"; {per_entry_us:.1f} µs wall per entry -> a full day of one partition"
                f" (86,400 entries) ≈ {per_entry_us * DAY_S / 1000:.0f} ms"
            )
            await client.aclose()
            await store.drop_database()
            await store.close()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--secantus", action="store_true")
    parser.add_argument("--entries", default="1000,10000")
    args = parser.parse_args()
    print(f"load: {Path('/proc/loadavg').read_text().split()[:3]} (2 cores, shared)")
    asyncio.run(secantus(args) if args.secantus else memory(args))


if __name__ == "__main__":
    main()
