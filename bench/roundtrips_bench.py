"""Store round trips per fired job, and CPU per job, for the whole pipeline.

Daemon and broker run in this process over one MongoStore (SecantusDB server in
a subprocess) and the in-process queue; a fast receiver answers in its own
process. Jobs are registered ahead in batches (as `POST /v1/jobs:batch` does),
spread evenly over the run. Every store call of the daemon and the broker is
counted by port operation, and every command they send on the wire (a PyMongo
command listener) by command and collection: a port call may be several commands
(a claim is an update and a read of what it took), and the wire count is the
round trips.

    .venv/bin/python bench/roundtrips_bench.py [--jobs 2000] [--seconds 10] [--group 1]

Commands are also split into those paid per batch of fired jobs and those paid
per interval whatever the rate (`per_job`): with `--group G` the jobs fall due G
at once, so the first count is what batches of about G cost per job while the
store keeps up (at high rates the daemon's claim windows hold about 64 jobs,
`COALESCE_JOBS`). SecantusDB saturates near 200 fires/s, so the batches a steady high
rate makes are measured by `batching_bench.py` instead (in-memory store, a MongoDB-like
delay per call).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from pymongo import monitoring

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_client_bench import start_receiver  # noqa: E402

from bench._common import process_cpu_s  # noqa: E402
from broker.app import Broker  # noqa: E402
from daemon.app import Daemon  # noqa: E402
from tests.support import SecantusServer  # noqa: E402
from timer_service.clock import SystemClock  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.model import BizType  # noqa: E402
from timer_service.queue.memory import MemoryQueue  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.mongo import MongoStore  # noqa: E402
from timer_service.store.recording import recording  # noqa: E402

WIRE_NOISE = {"ping", "hello", "isMaster", "ismaster", "endSessions", "killCursors"}


# A job's own reads: a claim's or a mark's read-back (by claim token, send token or
# identity). Other finds of a bucket are a second's load (one per second and
# partition at any rate) and the reconciler's and sweeps' scans, per interval.
JOB_READ_FIELDS = {"claim", "sending", "_id"}


def per_job(name: str, family: str, command: dict[str, object]) -> bool:
    """Whether a command is paid per batch of fired jobs (claims, marks, outcomes and
    their rounds), as opposed to per interval (leases, heartbeats, the seconds index,
    the reconciler's scans): the first shrinks per job as batches grow with the rate,
    the second as the rate grows."""
    if family == "rounds":
        return name != "find"
    if family != "jobs_b*":
        return False
    if name != "find":
        return True
    query = command.get("filter")
    keys = set(query) if isinstance(query, dict) else set()
    return bool(keys & JOB_READ_FIELDS)


class WireCount(monitoring.CommandListener):
    """Every command sent, by (command, collection family); buckets counted as one."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.per_job: Counter[tuple[str, str]] = Counter()  # those paid per batch (`per_job`)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        if name in WIRE_NOISE:
            return
        target = event.command.get(name)
        family = target if isinstance(target, str) else "-"
        if name == "getMore":
            family = str(event.command.get("collection", "-"))
        if family.startswith("jobs_b"):
            family = "jobs_b*"
        self.counts[(name, family)] += 1
        if per_job(name, family, event.command):
            self.per_job[(name, family)] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def run(jobs: int, seconds: int, group: int) -> None:
    wire = WireCount()
    monitoring.register(wire)  # before the store's clients are made
    server = SecantusServer()
    server.start()
    receiver, port = start_receiver()
    store = recording(MongoStore(server.url, f"rt{uuid.uuid4().hex[:8]}", buckets=60))
    await store.setup()
    clock = SystemClock()
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    metrics = Metrics()
    queue = MemoryQueue()
    await store.biz_types.put_biz_type(BizType("rt", f"http://127.0.0.1:{port}/callback"))
    daemon = Daemon(settings, store, queue, metrics, clock)
    broker = Broker(settings, store, queue, metrics, clock)
    try:
        first_due = clock.now_ms() + 4000
        # Groups of `group` jobs due at the same instant, spread evenly over the run: a
        # claim, a mark and an outcome write take about a group each.
        step = seconds * 1000 * group / jobs
        batch = [
            NewJob("rt", f"j{i}", first_due + int((i // group) * step), "null") for i in range(jobs)
        ]
        for start in range(0, jobs, 1000):
            await store.jobs.create_jobs(batch[start : start + 1000], clock.now_ms())
        before = Counter(store.ops)
        wire_before = Counter(wire.counts)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        assert server.proc is not None
        store_cpu0 = process_cpu_s(server.proc.pid)
        await daemon.start()
        await broker.start()
        # Start-up (the takeover sweep of every bucket, the first overdue sweep) is
        # counted apart: it is paid once per takeover, not per fired job.
        await asyncio.sleep(max(0.0, (first_due - 200 - clock.now_ms()) / 1000))
        wire_started = Counter(wire.counts)
        per_job_started, firing_from = Counter(wire.per_job), time.monotonic()
        deadline = time.monotonic() + seconds + 120
        while time.monotonic() < deadline:
            delivered = metrics.registry.get_sample_value(
                "timer_callbacks_total", {"biz_type": "rt", "outcome": "delivered"}
            )
            if delivered is not None and delivered >= jobs:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(3)  # let the last outcomes land
        per_job_counts, firing_s = Counter(wire.per_job), time.monotonic() - firing_from
        per_job_counts.subtract(per_job_started)
        per_job_count = sum(v for v in per_job_counts.values() if v > 0)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        store_cpu = process_cpu_s(server.proc.pid) - store_cpu0
        lateness = metrics.registry.get_sample_value(
            "timer_delivery_lateness_seconds_sum", {"biz_type": "rt"}
        )
        ops = Counter(store.ops)
        ops.subtract(before)
        for noise in ("list_jobs", "ping"):
            ops.pop(noise, None)
        total = sum(v for v in ops.values() if v > 0)
        print(
            f"\n{jobs:,} jobs fired over {seconds} s ({jobs / seconds:.0f}/s, in groups of "
            f"{group} due at once) on SecantusDB, daemon + broker in one process, "
            f"in-process queue"
        )
        print("| store operation | calls | per fired job |\n|---|---|---|")
        for name, count in sorted(ops.items(), key=lambda kv: -kv[1]):
            if count > 0:
                print(f"| {name} | {count:,} | {count / jobs:.3f} |")
        print(f"| **all** | {total:,} | **{total / jobs:.3f}** |")
        startup = Counter(wire_started)
        startup.subtract(wire_before)
        firing = Counter(wire.counts)
        firing.subtract(wire_started)
        firing_total = sum(v for v in firing.values() if v > 0)
        print("\n| command on the wire while firing | collection | count | per fired job |")
        print("|---|---|---|---|")
        for (name, family), count in sorted(firing.items(), key=lambda kv: -kv[1]):
            if count > 0:
                print(f"| {name} | {family} | {count:,} | {count / jobs:.3f} |")
        print(f"| **all** | | {firing_total:,} | **{firing_total / jobs:.3f}** |")
        polls = max(0, firing[("getMore", "seconds")])
        print(
            f"\nround trips per fired job: {firing_total / jobs:.3f} while firing, "
            f"{(firing_total - polls) / jobs:.3f} without the change stream's getMores "
            f"(the embedded store answers one per write anywhere; MongoDB at most 1/s); "
            f"start-up before the first due job (takeover sweep of every bucket): "
            f"{sum(v for v in startup.values() if v > 0):,} commands, apart"
        )
        per_interval = firing_total - polls - per_job_count
        print(
            f"of which per batch of jobs (claims, their rounds, marks, outcomes): "
            f"**{per_job_count / jobs:.3f} per fired job**; per interval (leases, "
            f"heartbeats, biz types, the seconds index, the reconciler's scans): "
            f"{per_interval:,} in {firing_s:.0f} s = **{per_interval / firing_s:.1f}/s**, "
            f"{per_interval / firing_s / 10_000:.4f} per job at 10,000 fires/s"
        )
        print(
            "per batch: "
            + ", ".join(
                f"{name} {family} {count / jobs:.3f}"
                for (name, family), count in sorted(per_job_counts.items(), key=lambda kv: -kv[1])
                if count > 0
            )
        )
        print(
            f"\ndaemon + broker CPU: {cpu:.1f} s over {wall:.0f} s = "
            f"{cpu * 1e6 / jobs:.0f} µs per fired job"
        )
        print(
            f"store (SecantusDB) CPU: {store_cpu:.1f} s = {store_cpu * 1e3 / jobs:.1f} ms per "
            f"fired job; mean first-send lateness {(lateness or 0) * 1e3 / jobs:.0f} ms"
        )
    finally:
        await broker.stop()
        await daemon.stop()
        await store.drop_database()
        await store.close()
        receiver.kill()
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--group", type=int, default=1, help="jobs due at the same instant")
    args = parser.parse_args()
    asyncio.run(run(args.jobs, args.seconds, args.group))


if __name__ == "__main__":
    main()
