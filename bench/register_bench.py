"""Registration throughput of the REST API: single creates and batches of 1000.

Runs the API in a subprocess (over the in-memory store, and over SecantusDB through
`timer-service api`), drives it with an aiohttp load generator from this process, and
reports jobs/s and the API process's CPU time per job (utime + stime from /proc).

    .venv/bin/python bench/register_bench.py [--runs 3] [--single 4000] [--batches 20]

Targets (bench/README.md, in-memory store): single >= 1,500 jobs/s, batch >= 20,000 jobs/s.
The load generator shares the machine's cores with the API: its own CPU per job is
printed too, so one can see when it, not the API, bounds the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import process_cpu_s  # noqa: E402
from tests.support import VENV_BIN, SecantusServer, free_port, wait_port  # noqa: E402

BIZ = "bench"


@dataclass
class Result:
    jobs: int
    wall_s: float
    api_cpu_s: float
    client_cpu_s: float

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.wall_s

    @property
    def api_us_per_job(self) -> float:
        return self.api_cpu_s / self.jobs * 1e6

    @property
    def client_us_per_job(self) -> float:
        return self.client_cpu_s / self.jobs * 1e6


@contextlib.contextmanager
def api_process(backend: str, secantus: SecantusServer | None) -> Iterator[tuple[str, int]]:
    port = free_port()
    env = {**os.environ, "TIMER_LOG_LEVEL": "WARNING", "TIMER_HTTP_PORT": str(port)}
    if backend == "memory":
        cmd = [sys.executable, str(ROOT / "bench" / "_memory_api.py"), str(port)]
    else:
        assert secantus is not None
        env |= {"TIMER_MONGO_URL": secantus.url, "TIMER_MONGO_DB": f"bench{port}"}
        cmd = [str(VENV_BIN / "timer-service"), "api"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        wait_port(port, 60)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def body(run: str, i: int) -> dict[str, object]:
    return {
        "biz_type": BIZ,
        "job_id": f"{run}-{i}",
        "delay_ms": 3_600_000,
        "payload": {"order": i, "note": "close if unpaid"},
    }


async def measure(pid: int, work: object) -> tuple[float, float, float]:
    api0, client0, t0 = process_cpu_s(pid), time.process_time(), time.perf_counter()
    await work  # type: ignore[misc]
    wall = time.perf_counter() - t0
    return wall, process_cpu_s(pid) - api0, time.process_time() - client0


async def single_run(
    session: aiohttp.ClientSession, url: str, pid: int, run: str, count: int, concurrency: int
) -> Result:
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            async with session.post(f"{url}/v1/jobs", json=body(run, i)) as response:
                if response.status != 201:
                    raise RuntimeError(
                        f"expected 201, got {response.status}: {await response.text()}"
                    )
                await response.read()

    wall, api, client = await measure(pid, asyncio.gather(*(worker() for _ in range(concurrency))))
    return Result(count, wall, api, client)


async def batch_run(
    session: aiohttp.ClientSession, url: str, pid: int, run: str, batches: int, size: int
) -> Result:
    async def send_all() -> None:
        for b in range(batches):
            jobs = [body(f"{run}-{b}", i) for i in range(size)]
            async with session.post(f"{url}/v1/jobs:batch", json={"jobs": jobs}) as response:
                data = await response.json()
                bad = [r["status"] for r in data["results"] if r["status"] != 201]
                if response.status != 200 or bad:
                    raise RuntimeError(f"batch failed: {response.status} {bad[:5]}")

    wall, api, client = await measure(pid, send_all())
    return Result(batches * size, wall, api, client)


async def bench_backend(
    backend: str, secantus: SecantusServer | None, args: argparse.Namespace
) -> dict[str, list[Result]]:
    scale = 1 if backend == "memory" else args.secantus_scale
    out: dict[str, list[Result]] = {"single": [], "batch": []}
    with api_process(backend, secantus) as (url, pid):
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.put(
                f"{url}/v1/biz-types/{BIZ}", json={"callback_url": "http://127.0.0.1:9/cb"}
            ) as r:
                assert r.status in (200, 201), await r.text()
            # Warm up (connections, imports, first-request paths).
            await single_run(session, url, pid, "warm", 200, args.concurrency)
            for run in range(args.runs):
                out["single"].append(
                    await single_run(
                        session,
                        url,
                        pid,
                        f"s{run}",
                        max(200, int(args.single * scale)),
                        args.concurrency,
                    )
                )
                out["batch"].append(
                    await batch_run(
                        session, url, pid, f"b{run}", max(2, int(args.batches * scale)), 1000
                    )
                )
    return out


def median(results: list[Result], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in results)


def report(all_results: dict[str, dict[str, list[Result]]], args: argparse.Namespace) -> None:
    print()
    print(
        f"Registration throughput, median of {args.runs} runs "
        f"(single: {args.concurrency} requests in flight; batch: 1000 jobs per request)"
    )
    header = (
        f"{'store':<10} {'mode':<7} {'jobs/run':>8} {'jobs/s':>10} "
        f"{'API CPU us/job':>15} {'client CPU us/job':>18} {'target':>8}"
    )
    print(header)
    print("-" * len(header))
    targets = {("memory", "single"): 1500, ("memory", "batch"): 20000}
    for backend, modes in all_results.items():
        for mode, results in modes.items():
            target = targets.get((backend, mode))
            rate = median(results, "jobs_per_s")
            mark = "" if target is None else (f"{target:>7}" + ("+" if rate >= target else "!"))
            print(
                f"{backend:<10} {mode:<7} {results[0].jobs:>8} {rate:>10,.0f} "
                f"{median(results, 'api_us_per_job'):>15,.1f} "
                f"{median(results, 'client_us_per_job'):>18,.1f} {mark:>8}"
            )
    print()
    print("API CPU us/job x jobs/s / 1e6 = cores the API used; with 2 cores shared by the API")
    print("and the load generator, a client CPU comparable to the API's means the client")
    print("bounds the single-create figure (the API alone would go further).")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single", type=int, default=4000, help="creates per single run")
    parser.add_argument("--batches", type=int, default=20, help="batches of 1000 per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--secantus-scale",
        type=float,
        default=0.25,
        help="fraction of the work to do against SecantusDB (slower)",
    )
    parser.add_argument("--only", choices=["memory", "secantus"], default=None)
    args = parser.parse_args()
    results: dict[str, dict[str, list[Result]]] = {}
    if args.only in (None, "memory"):
        results["memory"] = await bench_backend("memory", None, args)
        print("memory done", flush=True)
    if args.only in (None, "secantus"):
        secantus = SecantusServer()
        secantus.start()
        try:
            results["secantus"] = await bench_backend("secantus", secantus, args)
        finally:
            secantus.cleanup()
    report(results, args)


if __name__ == "__main__":
    asyncio.run(main())
