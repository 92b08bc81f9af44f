"""Capacity model: what a deployment needs for a number of parked jobs and fires/s.

From per-operation costs measured here (the defaults below, each with the bench
row it comes from; override any with a flag) it projects, for a workload of
parked jobs and sustained fires per second: daemon and broker processes, store
writes, round trips and storage, RabbitMQ messages, daemon memory, and which
resource saturates first. Document sizes are measured, not assumed: a typical
job document and its locator are built with the service's own layout code and
BSON-encoded.

Per-node capacities of MongoDB and RabbitMQ cannot be measured on this machine
(no mongod; one RabbitMQ node shared with everything else). They are stated as
assumptions, flagged as such in the output; change them with the flags when you
have your own figures.

    .venv/bin/python bench/capacity.py [--parked 100000000] [--fires 10000]
    .venv/bin/python bench/capacity.py --check     # the prediction against a run here

`--check` predicts the hot path's store round trips per fired job at 800 jobs/s and
runs bench/batching_bench.py to compare; then it predicts the herd bench's
throughput on this machine (daemon and broker in one process over the in-memory
store: bounded by one core) from the CPU per job that two other benches measured,
runs the herd bench and compares.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
import sys
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

import bson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from timer_service.jobs import NewJob, new_job  # noqa: E402
from timer_service.model import second_of  # noqa: E402
from timer_service.store.mongo.layout import job_to_doc, locator_doc  # noqa: E402


@dataclass
class Costs:
    """Measured here (bench/README.md), per fired job unless said otherwise."""

    # lateness_bench (in-memory store): 1,161 µs daemon + broker, less the broker's
    daemon_cpu_us: float = 855.0
    broker_cpu_us: float = 306.0  # callback_bench (in-memory store), outcome writes included
    store_writes: float = 3.0  # claim, send mark, outcome (docs/architecture.md)
    # Store round trips (MongoDB commands) on the hot path, as bench/batching_bench.py
    # measures them at a steady rate (in-memory store, 1 ms per store call; 500 and 800
    # jobs/s): a claim takes ~64 jobs at high rates (COALESCE_JOBS) and costs its
    # update, its read-back and its round's write (3.15 commands per claim) ...
    claim_jobs: float = 64.0
    claim_commands: float = 3.15
    # ... a broker marks on a beat (MARK_SPAN_MS, 100 ms): all its lanes' marks of a
    # beat share a store call, ~10 a second whatever the rate and the number of biz
    # types, 1.1 commands each (one per bucket among its jobs; 500 jobs/s over 1 or 4
    # biz types: 111 commands in 10 s) ...
    mark_commands_per_broker_s: float = 11.1
    # ... and a broker writes outcomes 64 at a time or 50 ms after the first
    # (FLUSH_BATCH, FLUSH_AFTER_S): max(its rate / 64, 20) writes/s, each one command
    # per bucket among its jobs.
    outcome_batch: float = 64.0
    outcome_writes_per_s_min: float = 20.0
    outcome_commands_per_write: float = 1.05
    # Paid per interval whatever the rate, by one daemon and one broker (leases,
    # heartbeats, biz types, the seconds index, the reconciler's scans):
    # roundtrips_bench --group 64, 10.3-11.3/s.
    store_round_trips_per_s: float = 10.4
    store_cpu_ms_secantus: float = 7.7  # roundtrips_bench --jobs 2000, SecantusDB only
    wheel_bytes_per_timer: float = 145.0  # wheel_bench
    lookahead_s: float = 5.0  # TIMER_LOOKAHEAD_MS default: what the wheel holds
    rabbit_msgs: float = 2.0  # a publish and an ack per fired job


@dataclass
class Assumed:
    """Not measurable here: stated, and flagged in the output."""

    core_per_process: float = 0.8  # usable share of a core by one Python process
    mongo_writes_per_shard: float = 15_000.0  # small updates/s of one shard's primary
    rabbit_msgs_per_node: float = 40_000.0  # quorum-queue messages/s of one node
    index_bytes_per_entry: float = 60.0  # per secondary index entry, WiredTiger prefix-compressed
    bucket_indexes: int = 7  # secondary indexes of a bucket collection (schema)
    locator_indexes: int = 3


def document_bytes(payload_bytes: int, labels: int) -> tuple[int, int]:
    """A typical pending job document and its locator, BSON-encoded."""
    now = 1_767_225_600_000
    payload = '"' + "x" * max(0, payload_bytes - 2) + '"'
    label_pairs = tuple((f"key{i}", f"value-{i}") for i in range(labels))
    job = new_job(
        NewJob(
            "orders-service", "order-12345678:expire", now + 3_600_000, payload, labels=label_pairs
        ),
        now,
    )
    doc = job_to_doc(job, second_of(job.due_at))
    locator = locator_doc(job, now, datetime.now(UTC), bucket=0)
    return len(bson.encode(doc)), len(bson.encode(locator))


def hot_round_trips(c: Costs, fires: float, brokers: int) -> float:
    """Commands/s of the hot path: claims, send marks, outcome writes."""
    claims = fires / c.claim_jobs * c.claim_commands
    marks = max(1, brokers) * c.mark_commands_per_broker_s
    per_broker = fires / max(1, brokers)
    writes = max(per_broker / c.outcome_batch, c.outcome_writes_per_s_min)
    return claims + marks + max(1, brokers) * writes * c.outcome_commands_per_write


def project(args: argparse.Namespace, c: Costs, a: Assumed) -> list[tuple[str, str, str, float]]:
    """(resource, demand, what one unit carries, units needed) rows."""
    fires = args.fires
    job_b, loc_b = document_bytes(args.payload_bytes, args.labels)
    per_job_b = (
        job_b
        + loc_b
        + a.index_bytes_per_entry * (a.bucket_indexes + 1)
        + a.index_bytes_per_entry * (a.locator_indexes + 1)
    )
    daemon_cores = fires * c.daemon_cpu_us / 1e6
    broker_cores = fires * c.broker_cpu_us / 1e6
    # Every daemon and broker pays its share of the per-interval round trips.
    processes = math.ceil(daemon_cores / a.core_per_process) + math.ceil(
        broker_cores / a.core_per_process
    )
    brokers = math.ceil(broker_cores / a.core_per_process)
    round_trips = hot_round_trips(c, fires, brokers) + (processes / 2 * c.store_round_trips_per_s)
    writes = fires * c.store_writes
    rabbit = fires * c.rabbit_msgs
    wheel_mb = fires * c.lookahead_s * c.wheel_bytes_per_timer / 1e6
    storage_gb = args.parked * per_job_b / 1e9
    return [
        (
            "daemon processes",
            f"{daemon_cores:.1f} cores ({c.daemon_cpu_us:.0f} µs/job)",
            f"{a.core_per_process} core (assumed)",
            daemon_cores / a.core_per_process,
        ),
        (
            "broker processes",
            f"{broker_cores:.1f} cores ({c.broker_cpu_us:.0f} µs/job)",
            f"{a.core_per_process} core (assumed)",
            broker_cores / a.core_per_process,
        ),
        (
            "MongoDB shards (writes)",
            f"{writes:,.0f} doc writes/s ({c.store_writes:g}/job)",
            f"{a.mongo_writes_per_shard:,.0f}/s (assumed)",
            writes / a.mongo_writes_per_shard,
        ),
        (
            "store round trips",
            f"{round_trips:,.0f}/s ({round_trips / fires:.3f}/job: claims, marks, outcomes; "
            f"{c.store_round_trips_per_s:g}/s per daemon and broker pair)",
            "batched: not a bound",
            0.0,
        ),
        (
            "RabbitMQ nodes",
            f"{rabbit:,.0f} msgs/s",
            f"{a.rabbit_msgs_per_node:,.0f}/s (assumed)",
            rabbit / a.rabbit_msgs_per_node,
        ),
        (
            "daemon memory (wheel)",
            f"{wheel_mb:,.0f} MB over all daemons ({c.lookahead_s:g} s look-ahead)",
            "parked jobs beyond it cost nothing",
            0.0,
        ),
        (
            "store storage",
            f"{storage_gb:,.0f} GB for {args.parked:,} parked "
            f"(job {job_b} B + locator {loc_b} B + index entries)",
            "disk: sized, not a rate",
            0.0,
        ),
        (
            "SecantusDB instead of MongoDB",
            f"{fires * c.store_cpu_ms_secantus / 1000:,.0f} cores of store CPU",
            "1 core, one process",
            fires * c.store_cpu_ms_secantus / 1000,
        ),
    ]


def print_table(args: argparse.Namespace, rows: list[tuple[str, str, str, float]]) -> None:
    print(f"\n{args.parked:,} parked jobs, {args.fires:,} fires/s sustained")
    print("| resource | demand | one unit carries | units needed |\n|---|---|---|---|")
    for name, demand, unit, needed in rows:
        shown = f"**{math.ceil(needed)}**" if needed else "-"
        print(f"| {name} | {demand} | {unit} | {shown} |")
    rated = [(needed, name) for name, _, _, needed in rows[:-1] if needed]
    first = max(rated)[1]
    print(
        f"\nSaturates first (most units per unit of load): {first}. Daemons and brokers"
        f" scale by partitions and biz types; the store by shards (shard key starts with"
        f" the partition)."
    )


def bench_figure(args: list[str], pattern: str) -> float:
    """Run `bench/<args[0]> args[1:]` and read the figure `pattern` captures."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(pattern, out)
    assert found, out
    return float(found.group(1).replace(",", ""))


def check_round_trips(c: Costs, rate: int = 800) -> None:
    predicted = hot_round_trips(c, rate, 1) / rate
    print(
        f"\nPrediction: store round trips on the hot path at {rate} jobs/s, one biz type, "
        f"one daemon and one broker: {predicted:.4f} per fired job"
    )
    measured = bench_figure(
        ["batching_bench.py", "--rate", str(rate)],
        r"\| \*\*all\*\* \| \| \| [\d,]+ \| \*\*([\d.]+)\*\* \|",
    )
    print(
        f"Measured (bench/batching_bench.py --rate {rate}): {measured:.4f} per fired job:"
        f" {measured / predicted:.2f} x the prediction"
    )


def check(c: Costs) -> None:
    predicted = 1e6 / (c.daemon_cpu_us + c.broker_cpu_us)
    print(
        f"\nPrediction: daemon + broker in one process on the in-memory store fire"
        f" {predicted:,.0f} jobs/s (one core / {c.daemon_cpu_us + c.broker_cpu_us:.0f} µs)"
    )
    measured = bench_figure(
        ["herd_bench.py", "--herd", "20000"], r"herd throughput \| ([\d,]+) callbacks/s"
    )
    print(
        f"Measured (bench/herd_bench.py --herd 20000): {measured:,.0f} jobs/s:"
        f" {measured / predicted:.2f} x the prediction"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=100_000_000)
    parser.add_argument("--fires", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=512)
    parser.add_argument("--labels", type=int, default=2)
    parser.add_argument("--check", action="store_true")
    costs, assumed = Costs(), Assumed()
    for obj in (costs, assumed):
        for f in fields(obj):
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(getattr(obj, f.name)))
    args = parser.parse_args()
    for obj in (costs, assumed):
        for f in fields(obj):
            value = getattr(args, f.name)
            if value is not None:
                setattr(obj, f.name, value)
    print_table(args, project(args, costs, assumed))
    if args.check:
        check_round_trips(costs)
        check(costs)


if __name__ == "__main__":
    main()
