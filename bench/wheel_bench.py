"""Timing wheel vs heapq vs asyncio's call_at: schedule, cancel, expire, memory.

    .venv/bin/python bench/wheel_bench.py [--n 100000 1000000] [--runs 3] [--gc-off]

For each N, N timers get deadlines uniform over --spread-ms (60 s) after a
realistic epoch-ms start; items are one shared object, so only the timer's own
cost counts. Measured, as the median of --runs runs:

- schedule + cancel: schedule all N, then cancel all N. ops/s counts each
  schedule and each cancel as one op (2N ops).
- schedule + expire: schedule all N, then advance the clock in 1 ms steps
  (a daemon's loop) to the end of the spread, collecting every item. Reported
  as timers/s (N over the whole time). asyncio cannot take part: its timers
  only expire inside a running loop in real time.
- bytes per parked timer: tracemalloc's growth while N timers are parked,
  over N (handles not kept by the caller; one run, it is deterministic).

The contenders:

- wheel: daemon.wheel.TimingWheel.
- heapq: the stdlib recipe: a [deadline, seq, item] entry per timer, cancel
  marks the entry removed (lazy delete), expiry pops and skips removed ones.
- asyncio: loop.call_at() on a loop that never runs: builds a TimerHandle and
  pushes it on the loop's heap; handle.cancel() marks it. Its lazy delete
  (the purge of cancelled handles) happens only in a running loop, so it is
  not in the numbers.

Times are the process's CPU time (time.process_time), so other load on a shared
machine inflates them less than wall time would; the wheel and heapq runs are
interleaved, so their ratio is the steadiest number here.

The garbage collector stays on (as in the daemon) unless --gc-off; with a
million parked objects its full collections are a visible share of the time,
the same for every contender.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.wheel import TimingWheel

START_MS = 1_700_000_000_000
ITEM = object()
_REMOVED = object()


def _noop() -> None:
    pass


# --- the contenders --------------------------------------------------------------------


def wheel_schedule_cancel(deadlines: list[int]) -> tuple[float, float]:
    wheel: TimingWheel[object] = TimingWheel(START_MS)
    schedule = wheel.schedule
    cancel = wheel.cancel
    t0 = time.process_time()
    timers = [schedule(deadline, ITEM) for deadline in deadlines]
    t1 = time.process_time()
    for timer in timers:
        cancel(timer)
    t2 = time.process_time()
    assert len(wheel) == 0
    return t1 - t0, t2 - t1


def wheel_schedule_expire(deadlines: list[int], spread_ms: int) -> float:
    wheel: TimingWheel[object] = TimingWheel(START_MS)
    schedule = wheel.schedule
    advance = wheel.advance
    t0 = time.process_time()
    for deadline in deadlines:
        schedule(deadline, ITEM)
    fired = 0
    for now in range(START_MS, START_MS + spread_ms + 1):
        fired += len(advance(now))
    elapsed = time.process_time() - t0
    assert fired == len(deadlines), (fired, len(deadlines))
    return elapsed


class HeapTimers:
    """The heapq recipe behind the wheel's API, so both pay the same call overheads."""

    __slots__ = ("_counter", "_heap", "live")

    def __init__(self) -> None:
        self._heap: list[list[Any]] = []
        self._counter = itertools.count()  # ties by schedule order, never comparing items
        self.live = 0

    def schedule(self, deadline_ms: int, item: object) -> list[Any]:
        entry = [deadline_ms, next(self._counter), item]
        heapq.heappush(self._heap, entry)
        self.live += 1
        return entry

    def cancel(self, entry: list[Any]) -> bool:
        if entry[2] is _REMOVED:
            return False
        entry[2] = _REMOVED
        self.live -= 1
        return True

    def advance(self, now_ms: int) -> list[object]:
        heap = self._heap
        due = []
        while heap and heap[0][0] <= now_ms:
            item = heapq.heappop(heap)[2]
            if item is not _REMOVED:
                due.append(item)
        self.live -= len(due)
        return due


def heap_schedule_cancel(deadlines: list[int]) -> tuple[float, float]:
    timers = HeapTimers()
    schedule = timers.schedule
    cancel = timers.cancel
    t0 = time.process_time()
    entries = [schedule(deadline, ITEM) for deadline in deadlines]
    t1 = time.process_time()
    for entry in entries:
        cancel(entry)
    t2 = time.process_time()
    assert timers.live == 0
    return t1 - t0, t2 - t1


def heap_schedule_expire(deadlines: list[int], spread_ms: int) -> float:
    timers = HeapTimers()
    schedule = timers.schedule
    advance = timers.advance
    t0 = time.process_time()
    for deadline in deadlines:
        schedule(deadline, ITEM)
    fired = 0
    for now in range(START_MS, START_MS + spread_ms + 1):
        fired += len(advance(now))
    elapsed = time.process_time() - t0
    assert fired == len(deadlines), (fired, len(deadlines))
    return elapsed


def asyncio_schedule_cancel(deadlines: list[int]) -> tuple[float, float]:
    loop = asyncio.new_event_loop()
    try:
        call_at = loop.call_at
        base_s = loop.time()
        whens = [base_s + (deadline - START_MS) / 1000 for deadline in deadlines]
        t0 = time.process_time()
        handles = [call_at(when, _noop) for when in whens]
        t1 = time.process_time()
        for handle in handles:
            handle.cancel()
        t2 = time.process_time()
        return t1 - t0, t2 - t1
    finally:
        loop.close()


# --- memory ----------------------------------------------------------------------------


def parked_bytes(park: Callable[[list[int]], object], deadlines: list[int]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        keep = park(deadlines)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if isinstance(keep, asyncio.AbstractEventLoop):
        keep.close()
    return (after - before) / len(deadlines)


def park_wheel(deadlines: list[int]) -> object:
    wheel: TimingWheel[object] = TimingWheel(START_MS)
    for deadline in deadlines:
        wheel.schedule(deadline, ITEM)
    return wheel


def park_heap(deadlines: list[int]) -> object:
    timers = HeapTimers()
    for deadline in deadlines:
        timers.schedule(deadline, ITEM)
    return timers


def park_asyncio(deadlines: list[int]) -> object:
    loop = asyncio.new_event_loop()
    base_s = loop.time()
    for deadline in deadlines:
        loop.call_at(base_s + (deadline - START_MS) / 1000, _noop)
    return loop


# --- driver ----------------------------------------------------------------------------


def run_size(n: int, runs: int, spread_ms: int, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    deadlines = [START_MS + rng.randrange(spread_ms) for _ in range(n)]
    samples: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    for _ in range(runs):
        for name, fn in [
            ("wheel", wheel_schedule_cancel),
            ("heapq", heap_schedule_cancel),
            ("asyncio", asyncio_schedule_cancel),
        ]:
            gc.collect()
            schedule_s, cancel_s = fn(deadlines)
            record(f"{name} schedule", schedule_s)
            record(f"{name} cancel", cancel_s)
            record(f"{name} both", schedule_s + cancel_s)
        for name, expire_fn in [("wheel", wheel_schedule_expire), ("heapq", heap_schedule_expire)]:
            gc.collect()
            record(f"{name} expire", expire_fn(deadlines, spread_ms))

    def med(key: str) -> float:
        return statistics.median(samples[key])

    def ns_per(key: str) -> float:
        return med(key) / n * 1e9

    memory = {
        "wheel": parked_bytes(park_wheel, deadlines),
        "heapq": parked_bytes(park_heap, deadlines),
        "asyncio": parked_bytes(park_asyncio, deadlines),
    }
    gc.collect()

    rows: list[tuple[str, list[float | None]]] = [
        ("schedule, ns/timer", [ns_per(f"{c} schedule") for c in ("wheel", "heapq", "asyncio")]),
        ("cancel, ns/timer", [ns_per(f"{c} cancel") for c in ("wheel", "heapq", "asyncio")]),
        (
            "schedule+cancel, ops/s (2 ops/timer)",
            [2 * n / med(f"{c} both") for c in ("wheel", "heapq", "asyncio")],
        ),
        (
            "schedule+expire, timers/s (1 ms steps)",
            [n / med("wheel expire"), n / med("heapq expire"), None],
        ),
        ("bytes per parked timer", [memory["wheel"], memory["heapq"], memory["asyncio"]]),
    ]
    table = []
    for label, (wheel, heap, aio) in rows:
        ratio = f"{wheel / heap:.2f}" if wheel is not None and heap else "-"
        table.append((label, [_fmt(wheel), _fmt(heap), _fmt(aio), ratio]))
    return table


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spread-ms", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gc-off", action="store_true", help="disable the garbage collector")
    args = parser.parse_args(argv)
    if args.gc_off:
        gc.disable()

    print(
        f"Python {sys.version.split()[0]}, deadlines uniform over {args.spread_ms:,} ms, "
        f"median of {args.runs} runs, gc {'off' if args.gc_off else 'on'}"
    )
    header = ["wheel", "heapq", "asyncio", "wheel/heapq"]
    for n in args.n:
        started = time.perf_counter()
        table = run_size(n, args.runs, args.spread_ms, args.seed)
        print(f"\nN = {n:,}  ({time.perf_counter() - started:.0f} s wall)")
        print(f"{'':40}" + "".join(f"{h:>13}" for h in header))
        for label, cells in table:
            print(f"{label:40}" + "".join(f"{c:>13}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
