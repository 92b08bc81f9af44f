"""A herd with a flexible window: 100,000 jobs registered for one second with a 60 s
window, and how evenly they land on the 61 seconds of the window.

The API runs in-process (httpx over ASGI) on the in-memory store. Several API
instances deciding at the same time are modelled by `--instances` apps over one
store whose calendar read yields to the event loop for `--read-ms` before it answers
(a store round trip): every create in flight then decides on the calendar as it was
before the others wrote, as creates on different API processes do. `--concurrency`
clients send at once, round robin over the instances; `--batch` jobs per request
(1: one `POST /v1/jobs` each).

Prints the busiest second against the even share (the bound: 1.2 times) and the CPU per
job registered. What it depends on: the batch size and the creates in flight at once
(a second picked by c creates that read the same calendar gets up to c jobs more than
its share, less the ties they spread over).

    .venv/bin/python bench/window_bench.py [--jobs 100000] [--window-ms 60000]
        [--batch 1000] [--concurrency 8] [--instances 4] [--read-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from timer_service.api import create_app  # noqa: E402
from timer_service.clock import FakeClock  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.memory import MemoryStore  # noqa: E402
from timer_service.store.memory.calendar import MemoryCalendar  # noqa: E402

T0 = 1_767_225_600_000
DUE = T0 + 600_000  # a whole second, ten minutes ahead


class RoundTripCalendar(MemoryCalendar):
    """The in-memory calendar, answering as after a store round trip: what it read is
    what the store held when the request arrived, and others run meanwhile."""

    def __init__(self, store: MemoryStore, read_ms: float) -> None:
        super().__init__(store.state)
        self._read_s = read_ms / 1000

    async def due_by_second(self, from_s: int, to_s: int, biz_type: str | None) -> dict[int, int]:
        load = await super().due_by_second(from_s, to_s, biz_type)
        await asyncio.sleep(self._read_s)
        return load


def instance(store: MemoryStore, read_ms: float) -> MemoryStore:
    sibling = store.sibling()
    sibling.calendar = RoundTripCalendar(store, read_ms)
    return sibling


async def run(args: argparse.Namespace) -> None:
    store = MemoryStore(buckets=60)
    clock = FakeClock(T0)
    clients = []
    for i in range(args.instances):
        app = create_app(Settings(), instance(store, args.read_ms), Metrics(), clock)  # type: ignore[call-arg]
        transport = httpx.ASGITransport(app=app)
        clients.append(httpx.AsyncClient(transport=transport, base_url=f"http://api{i}"))
    put = await clients[0].put("/v1/biz-types/orders", json={"callback_url": "http://127.0.0.1/"})
    assert put.status_code == 201, put.text
    requests: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
    for start in range(0, args.jobs, args.batch):
        requests.put_nowait(
            [
                {
                    "biz_type": "orders",
                    "job_id": f"h{n}",
                    "due_at": DUE,
                    "window_ms": args.window_ms,
                }
                for n in range(start, min(start + args.batch, args.jobs))
            ]
        )

    async def client(i: int) -> None:
        http = clients[i % len(clients)]
        while not requests.empty():
            jobs = requests.get_nowait()
            if len(jobs) == 1:
                r = await http.post("/v1/jobs", json=jobs[0])
                assert r.status_code == 201, r.text
            else:
                r = await http.post("/v1/jobs:batch", json={"jobs": jobs})
                assert r.status_code == 200, r.text

    cpu0 = time.process_time()
    await asyncio.gather(*(client(i) for i in range(args.concurrency)))
    cpu_us = (time.process_time() - cpu0) * 1e6 / args.jobs
    fires = Counter(j.next_attempt_at for j in store.state.jobs.values())
    assert sum(fires.values()) == args.jobs
    seconds = args.window_ms // 1000 + 1
    even = args.jobs / seconds
    busiest = max(fires.values())
    print(
        f"{args.jobs:,} jobs due at one second, window {args.window_ms} ms ({seconds} seconds):"
        f" batch {args.batch}, {args.concurrency} clients over {args.instances} API instance(s),"
        f" calendar read {args.read_ms} ms"
    )
    print(
        f"  busiest second {busiest} jobs, quietest {min(fires.values())}, even share"
        f" {even:.0f}: busiest / even = {busiest / even:.3f} (bound 1.2);"
        f" seconds used {len(fires)}; CPU {cpu_us:.0f} µs per job registered"
    )
    for http in clients:
        await http.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--read-ms", type=float, default=2.0)
    args = parser.parse_args()
    print(f"load: {Path('/proc/loadavg').read_text().split()[:3]} (2 cores, shared)")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
