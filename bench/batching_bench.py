"""How the hot path's store writes batch at a steady rate, with a store as slow as a
MongoDB round trip, and the MongoDB commands that makes per fired job.

`roundtrips_bench.py` counts the commands on the wire, but on SecantusDB, which
saturates near 200 fires/s: its batches are as large as the store's slowness lets
them grow, not what a rate brings. This one runs the daemon and the broker over the
in-memory store with every store call delayed by `--latency-ms` (a MongoDB round
trip on a LAN is ~0.5-2 ms), at a steady rate the in-memory store carries, and
records for each hot-path call how many jobs it took and how many commands the
MongoDB adapter sends for it:

- a claim (`claim_due`): an update and its read-back (one second, so one bucket);
- a claim round (`open_round`, closing the confirmed ones in the same write; or
  `close_rounds` alone): one command;
- a send mark (`start_sending`): one update command per bucket among its jobs (a
  statement per claim in it), the message carrying its job (MongoDB only; payload
  <= 1 KiB, the normal case), and one read of the biz types' ownership epochs
  (`owners`) when its refs carry one (a broker's lanes always do);
- outcomes (`record_outcomes`): one bulk update per bucket among its jobs (their home
  buckets, named by their messages), and one bump of the seconds index if any is a
  retry.

Everything else (leases, heartbeats, the seconds index, loads, the reconciler) is
counted as port calls per second: paid per interval, whatever the rate.

    .venv/bin/python bench/batching_bench.py [--rate 500] [--seconds 10] [--latency-ms 1]

Jobs are registered ahead, due evenly over the run across `--biz-types`; the queue is
in-process; the receiver is its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_client_bench import start_receiver  # noqa: E402

from broker.app import Broker  # noqa: E402
from daemon.app import Daemon  # noqa: E402
from timer_service.clock import SystemClock  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.model import BizType  # noqa: E402
from timer_service.queue.memory import MemoryQueue  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.memory import MemoryStore  # noqa: E402
from timer_service.store.recording import PORTS  # noqa: E402

BUCKETS = 60


def _claimed(args: tuple[Any, ...], result: Any) -> tuple[int, int]:
    return len(result), 2 if result else 1


def _round(args: tuple[Any, ...], result: Any) -> tuple[int, int]:
    return 0, 1


def _home(ref: Any) -> int:
    """The bucket a message names (before jobs had homes: its second's)."""
    bucket = getattr(ref, "bucket", None)
    return ref.second % BUCKETS if bucket is None else int(bucket)


def _marked(args: tuple[Any, ...], result: Any) -> tuple[int, int]:
    refs = args[0]
    epochs = any(getattr(r, "epoch", None) is not None for r in refs)
    return len(refs), len({_home(r) for r in refs}) + epochs


def _recorded(args: tuple[Any, ...], result: Any) -> tuple[int, int]:
    # One bulk update per home bucket among them, and one seconds-index bump when
    # any is a retry.
    outcomes = args[0]
    bump = any(o.next_attempt_at is not None for o in outcomes)
    return len(outcomes), len({_home(o.ref) for o in outcomes}) + bump


# Per hot-path call: (jobs it took, MongoDB commands it costs), from its arguments and
# result (the rules in this module's docstring).
HOT: dict[str, Callable[[tuple[Any, ...], Any], tuple[int, int]]] = {
    "claim_due": _claimed,
    "open_round": _round,
    "close_rounds": _round,
    "start_sending": _marked,
    "record_outcomes": _recorded,
}


class Tally:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.jobs: Counter[str] = Counter()
        self.commands: Counter[str] = Counter()
        self.sizes: dict[str, list[int]] = {name: [] for name in HOT}

    def count(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        self.calls[name] += 1
        if name in HOT:
            jobs, commands = HOT[name](args, result)
            self.jobs[name] += jobs
            self.commands[name] += commands
            if jobs:
                self.sizes[name].append(jobs)


class _SlowPort:
    """Every async call waits `latency_s` before it reaches the store: a round trip."""

    def __init__(self, port: Any, latency_s: float, tally: Tally) -> None:
        self._port, self._latency_s, self._tally = port, latency_s, tally

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def slow(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(self._latency_s)
            result = await attr(*args, **kwargs)
            self._tally.count(name, args, result)
            return result

        return slow


class SlowStore:
    def __init__(self, store: MemoryStore, latency_s: float, tally: Tally) -> None:
        self.inner = store
        for name in PORTS:
            setattr(self, name, _SlowPort(getattr(store, name), latency_s, tally))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class LatenessMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.late_ms: list[float] = []

    def callback_sent(self, biz_type: str, attempt: int, lateness_s: float) -> None:
        super().callback_sent(biz_type, attempt, lateness_s)
        if attempt == 1:
            self.late_ms.append(lateness_s * 1000)


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1] if len(values) > 1 else values[0]


async def run(rate: int, seconds: int, latency_ms: float, biz_types: int) -> None:
    receiver, port = start_receiver()
    tally = Tally()
    inner = MemoryStore(buckets=BUCKETS)
    await inner.setup()
    store: Any = SlowStore(inner, latency_ms / 1000, tally)
    clock = SystemClock()
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    metrics = LatenessMetrics()
    queue = MemoryQueue()
    names = [f"b{i}" for i in range(biz_types)]
    url = f"http://127.0.0.1:{port}/callback"
    for name in names:
        await inner.biz_types.put_biz_type(BizType(name, url, max_concurrency=64))
    total = rate * seconds
    first_due = clock.now_ms() + 3000
    jobs = [
        NewJob(names[i % biz_types], f"j{i}", first_due + i * 1000 // rate, "null")
        for i in range(total)
    ]
    for start in range(0, total, 5000):
        await inner.jobs.create_jobs(jobs[start : start + 5000], clock.now_ms())
    daemon = Daemon(settings, store, queue, metrics, clock)
    broker = Broker(settings, store, queue, metrics, clock)
    try:
        await daemon.start()
        await broker.start()
        await asyncio.sleep(max(0.0, (first_due - clock.now_ms()) / 1000))
        before = Counter(tally.calls)
        cpu0, wall0 = time.process_time(), time.monotonic()
        deadline = wall0 + seconds + 60
        while len(metrics.late_ms) < total and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)  # the last outcomes land
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    finally:
        await broker.stop()
        await daemon.stop()
        receiver.kill()
    other = Counter(tally.calls)
    other.subtract(before)
    for name in HOT:
        other.pop(name, None)
    fired = len(metrics.late_ms)
    print(
        f"\n{fired:,} of {total:,} jobs fired at {rate}/s over {seconds} s, {biz_types} biz "
        f"types, in-memory store with {latency_ms:g} ms per store call, in-process queue; "
        f"daemon + broker CPU {cpu * 1e6 / max(1, fired):.0f} µs per job"
    )
    late = metrics.late_ms
    print(
        f"send lateness p50 / p99 / max: {pct(late, 50):.1f} / {pct(late, 99):.1f} / "
        f"{max(late):.1f} ms, early: {sum(1 for v in late if v < 0)}"
    )
    print(
        "| hot-path call | calls | jobs per call (median / mean) | MongoDB commands "
        "| commands per fired job |\n|---|---|---|---|---|"
    )
    for name in HOT:
        sizes = tally.sizes[name]
        size = f"{statistics.median(sizes):.0f} / {statistics.mean(sizes):.1f}" if sizes else "-"
        print(
            f"| {name} | {tally.calls[name]:,} | {size} | {tally.commands[name]:,} "
            f"| {tally.commands[name] / fired:.4f} |"
        )
    hot = sum(tally.commands.values())
    per_s = sum(v for v in other.values() if v > 0) / wall
    print(
        f"| **all** | | | {hot:,} | **{hot / fired:.4f}** |\n\nper interval (other port "
        f"calls, whatever the rate): {per_s:.1f}/s; "
        + ", ".join(f"{n} {c / wall:.1f}" for n, c in other.most_common(6) if c > 0)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500, help="jobs due per second")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--latency-ms", type=float, default=1.0, help="added to each store call")
    parser.add_argument("--biz-types", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(run(args.rate, args.seconds, args.latency_ms, args.biz_types))


if __name__ == "__main__":
    main()
