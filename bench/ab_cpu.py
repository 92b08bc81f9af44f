"""CPU per fired job of two variants, interleaved: A, B, A, B, ... then the medians.

A variant is a source tree (`--tree-a`, `--tree-b`: a checkout or `git archive` of a
commit; default this one) plus extra arguments for bench/lateness_bench.py
(`--args-a`, `--args-b`). Each run is one `lateness_bench.py --store memory --runs 1`
in a fresh process; the CPU figure is process CPU time / jobs fired, which a loaded
machine disturbs far less than latency, and the load average is printed per run so
the figures can be read with it.

    .venv/bin/python bench/ab_cpu.py --args-a "--loop asyncio" --args-b "--loop uvloop"
    git archive 6a5664f | tar -x -C /tmp/base
    .venv/bin/python bench/ab_cpu.py --tree-a /tmp/base --pairs 4
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU = re.compile(r"CPU (\d+) µs/job.*?RabbitMQ server (\S+) µs/job")
LATE = re.compile(r"lateness p50 (\S+) p99 (\S+)")


def one_run(tree: Path, extra: str, seconds: float, rate: int) -> tuple[float, float, str]:
    command = [
        sys.executable,
        str(tree / "bench" / "lateness_bench.py"),
        "--store",
        "memory",
        "--runs",
        "1",
        "--seconds",
        str(seconds),
        "--rate",
        str(rate),
        *shlex.split(extra),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    out = done.stdout
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr[-1500:]}")
    cpu = CPU.search(out)
    late = LATE.search(out)
    if cpu is None or late is None:
        raise RuntimeError(f"no figures in the output of {command}:\n{out}")
    return float(cpu[1]), float(cpu[2]), f"p50 {late[1]} p99 {late[2]} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree-a", type=Path, default=ROOT)
    parser.add_argument("--tree-b", type=Path, default=ROOT)
    parser.add_argument("--args-a", default="")
    parser.add_argument("--args-b", default="")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=500)
    args = parser.parse_args()
    variants = {"A": (args.tree_a, args.args_a), "B": (args.tree_b, args.args_b)}
    for name, (tree, extra) in variants.items():
        print(f"{name}: {tree} {extra}", flush=True)
    cpu: dict[str, list[float]] = {"A": [], "B": []}
    rabbit: dict[str, list[float]] = {"A": [], "B": []}
    loads = []
    for i in range(args.pairs):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            load = os.getloadavg()[0]
            loads.append(load)
            tree, extra = variants[name]
            try:
                us, rabbit_us, late = one_run(tree, extra, args.seconds, args.rate)
            except RuntimeError as exc:  # printed and left out of the medians
                print(f"  {name}: run failed: {exc}", flush=True)
                continue
            cpu[name].append(us)
            rabbit[name].append(rabbit_us)
            print(
                f"  {name}: {us:.0f} µs/job (RabbitMQ {rabbit_us:.0f}); {late}; load {load:.1f}",
                flush=True,
            )
    a, b = statistics.median(cpu["A"]), statistics.median(cpu["B"])
    for name in ("A", "B"):
        runs = ", ".join(f"{x:.0f}" for x in cpu[name])
        print(
            f"{name}: median {statistics.median(cpu[name]):.0f} µs/job ({runs}); "
            f"RabbitMQ median {statistics.median(rabbit[name]):.0f} µs/job"
        )
    print(f"B/A {b / a:.2f}; load average {min(loads):.1f}-{max(loads):.1f} during the runs")


if __name__ == "__main__":
    main()
