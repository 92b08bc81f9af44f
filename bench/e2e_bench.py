"""Fires per second end to end, with one daemon or several: API → store → daemon →
RabbitMQ → broker → receiver, every process the real `timer-service` command.

Per run: a SecantusDB server of its own, `timer-service api`, `--daemons` daemons and
`--brokers` brokers (TIMER_PARTITIONS = `--partitions`, default the daemon count),
`--biz-types` biz types answered by a receiver in this process. Jobs are registered
ahead through `POST /v1/jobs:batch` (1000 per call), due evenly at `--rate` per
second for `--seconds`, the first `--lead` s after registration ends; then every
callback is awaited (up to 120 s after the last due moment).

Printed per run and as medians: delivered fires/s (jobs / (last first-callback
arrival - first due moment); at a rate the pipeline keeps up with, this is the
offered rate), lateness of first callbacks (arrival - due: p50 / p99 / max),
callbacks early, missing and repeated, and CPU per fired job of each kind of
process (from /proc, start of the due window to the last callback) with the
store server's beside them: what saturates first. And where the lateness arose, from
the processes' own histograms: the daemons' publish time minus due time
(`timer_dispatch_lateness_seconds`, 0 when published ahead) and the brokers' send
time minus due time (`timer_delivery_lateness_seconds`), each as the bucket bound
its p50 and p99 fall under.

    .venv/bin/python bench/e2e_bench.py --daemons 1 2 --rate 25 --seconds 20 --runs 3
    .venv/bin/python bench/e2e_bench.py --daemons 2 --partitions 8 --rate 40
    BENCH_LOG_LEVEL=INFO .venv/bin/python bench/e2e_bench.py ...   # the processes' logs
                                              # (in /tmp/timer-e2e-logs) at INFO
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import process_cpu_s  # noqa: E402
from tests.e2e.harness import Arrival, Receiver, Service, now_ms  # noqa: E402
from tests.support import AMQP_URL, SecantusServer, drop_topology_sync, free_port  # noqa: E402


def histogram_quantiles(texts: list[str], name: str) -> tuple[float, float]:
    """The bucket bounds under which p50 and p99 of histogram `name` fall, summed over
    every label set and every process's `/metrics` text."""
    cumulative: dict[float, float] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == f"{name}_bucket":
                    le = float(sample.labels["le"])
                    cumulative[le] = cumulative.get(le, 0.0) + sample.value
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]] if bounds else 0.0
    if not total:
        return float("nan"), float("nan")

    def bound(q: float) -> float:
        return next(le for le in bounds if cumulative[le] >= q * total)

    return bound(0.5), bound(0.99)


async def scrape(services: dict[str, Service], kind: str) -> list[str]:
    async with httpx.AsyncClient(timeout=5) as client:
        return [
            (await client.get(f"http://127.0.0.1:{s.port}/metrics")).text
            for name, s in services.items()
            if name.startswith(f"{kind}-")
        ]


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def start_services(url: str, prefix: str, args: argparse.Namespace) -> dict[str, Service]:
    env = {
        "TIMER_MONGO_URL": url,
        "TIMER_MONGO_DB": prefix,
        "TIMER_AMQP_URL": AMQP_URL,
        "TIMER_QUEUE_PREFIX": prefix,
        "TIMER_PARTITIONS": str(args.partitions or max(args.daemons)),
        "TIMER_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        "TIMER_SHUTDOWN_GRACE_S": "5",
    }
    api_port = free_port()
    services = {"api": Service("api", {**env, "TIMER_HTTP_PORT": str(api_port)}, api_port)}
    services["api"].start()  # first: it creates the indexes, the others only read them
    for role, count in (("daemon", args.current_daemons), ("broker", args.brokers)):
        for i in range(count):
            port = free_port()
            name = f"{role}-{i}"
            services[name] = Service(role, {**env, "TIMER_METRICS_PORT": str(port)}, port, name)
            services[name].start()
    return services


async def one_run(args: argparse.Namespace, run: int) -> dict[str, float]:
    server = SecantusServer()
    server.start()
    prefix = f"e2eb{os.getpid()}r{run}d{args.current_daemons}"
    services = start_services(server.url, prefix, args)
    receiver = Receiver()
    await receiver.start()
    try:
        return await measure(args, services, server, receiver)
    finally:
        await receiver.stop()
        for service in services.values():
            service.stop_quietly()
        server.cleanup()
        drop_topology_sync(prefix)


async def measure(
    args: argparse.Namespace,
    services: dict[str, Service],
    server: SecantusServer,
    receiver: Receiver,
) -> dict[str, float]:
    api_url = f"http://127.0.0.1:{services['api'].port}"
    total = int(args.rate * args.seconds)
    async with httpx.AsyncClient(base_url=api_url, timeout=120) as api:
        names = [f"e2e{i}" for i in range(args.biz_types)]
        for biz in names:
            r = await api.put(f"/v1/biz-types/{biz}", json={"callback_url": receiver.url})
            assert r.status_code in (200, 201), r.text
        await asyncio.sleep(2)  # every broker has discovered them
        jobs = [(names[i % len(names)], f"j{i:06}") for i in range(total)]
        registered = time.monotonic()
        start = now_ms() + int(args.lead * 1000) + int(total / 2)  # ~2 ms per batched create
        step_ms = 1000 / args.rate
        for chunk in range(0, total, 1000):
            batch = [
                {"biz_type": biz, "job_id": job_id, "due_at": start + int(i * step_ms)}
                for i, (biz, job_id) in enumerate(jobs[chunk : chunk + 1000], start=chunk)
            ]
            r = await api.post("/v1/jobs:batch", json={"jobs": batch})
            assert r.status_code == 200, r.text
        late_registration_ms = now_ms() - start
        if late_registration_ms > 0:
            print(f"  registration ended {late_registration_ms} ms after the first due moment")
        print(f"  registered {total} jobs in {time.monotonic() - registered:.1f} s")
        await asyncio.sleep(max(0.0, (start - now_ms()) / 1000))
        pids = {name: s.proc.pid for name, s in services.items() if s.proc is not None}
        assert server.proc is not None
        pids["store"] = server.proc.pid
        cpu0 = {name: process_cpu_s(pid) for name, pid in pids.items()}
        deadline = time.monotonic() + args.seconds + 120
        wanted = {job_id for _, job_id in jobs}
        while time.monotonic() < deadline and not wanted <= {a.job_id for a in receiver.arrivals}:
            await asyncio.sleep(0.2)
        cpu1 = {name: process_cpu_s(pid) for name, pid in pids.items()}
        published = histogram_quantiles(
            await scrape(services, "daemon"), "timer_dispatch_lateness_seconds"
        )
        sent = histogram_quantiles(
            await scrape(services, "broker"), "timer_delivery_lateness_seconds"
        )
    firsts: dict[str, Arrival] = {}
    for a in sorted(receiver.arrivals, key=lambda a: a.at_ms):
        firsts.setdefault(a.job_id, a)
    late = sorted(a.at_ms - a.due_at for a in firsts.values())
    done = len(firsts)
    span_s = (max(a.at_ms for a in firsts.values()) - start) / 1000 if firsts else 0.0
    by_kind: dict[str, float] = {}
    for name in pids:
        kind = name.split("-")[0]
        by_kind[kind] = by_kind.get(kind, 0.0) + (cpu1[name] - cpu0[name])
    out = {
        "fires_per_s": done / span_s if span_s else 0.0,
        "p50_ms": statistics.median(late) if late else float("nan"),
        "p99_ms": late[int(len(late) * 0.99) - 1] if late else float("nan"),
        "max_ms": late[-1] if late else float("nan"),
        "early": sum(1 for x in late if x < 0),
        "missing": total - done,
        "repeated": len(receiver.arrivals) - done,
        "published_p50_ms": published[0] * 1000,
        "published_p99_ms": published[1] * 1000,
        "sent_p50_ms": sent[0] * 1000,
        "sent_p99_ms": sent[1] * 1000,
    }
    for kind, seconds in by_kind.items():
        out[f"{kind}_ms_per_job"] = seconds * 1000 / max(1, done)
    return out


def show(label: str, r: dict[str, float]) -> str:
    cpu = ", ".join(
        f"{k.removesuffix('_ms_per_job')} {v:.1f}"
        for k, v in r.items()
        if k.endswith("_ms_per_job")
    )
    return (
        f"{label}: {r['fires_per_s']:.1f} fires/s; lateness p50 {r['p50_ms']:.0f} ms, "
        f"p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms; early {r['early']:.0f}, "
        f"missing {r['missing']:.0f}, repeated {r['repeated']:.0f}; CPU ms/job: {cpu}; "
        f"published late p50/p99 <= {r['published_p50_ms']:g}/{r['published_p99_ms']:g} ms, "
        f"sent late <= {r['sent_p50_ms']:g}/{r['sent_p99_ms']:g} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=0, help="default: the most daemons")
    parser.add_argument("--biz-types", type=int, default=4)
    parser.add_argument("--rate", type=float, default=25.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lead", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {load_average()}")
    for daemons in args.daemons:
        args.current_daemons = daemons
        partitions = args.partitions or max(args.daemons)
        label = (
            f"{daemons} daemon(s), {args.brokers} broker(s), P={partitions}"
            f", {args.rate:g}/s for {args.seconds:g} s"
        )
        results = []
        for run in range(args.runs):
            results.append(await one_run(args, run))
            print(show(f"  run {run + 1}", results[-1]), flush=True)
        median = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(show(f"{label} (median of {args.runs})", median), flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    asyncio.run(main())
