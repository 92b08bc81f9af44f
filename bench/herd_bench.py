"""Thundering herd: 100,000 jobs due in the same second, and another biz type's
jobs due steadily meanwhile.

Daemon and broker run in this process over the in-memory store and real
RabbitMQ (publisher confirms, quorum queues); the receiver is a separate
process. Prints the time from the herd's due second until its last callback
went out, the herd's delivery lateness, and the steady biz type's delivery
lateness while the herd drains (isolation).

    .venv/bin/python bench/herd_bench.py [--herd 100000] [--steady-rate 100]
        [--window-ms 60000]

With `--window-ms`, the herd is registered with that flexible window, through the
registrar as the API does (each job takes the least-loaded second of its window by
the load calendar), and its lateness is counted from each job's `fire_at`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import aio_pika  # noqa: E402
from _common import GcPauses  # noqa: E402
from http_client_bench import start_receiver  # noqa: E402

from broker.app import Broker  # noqa: E402
from daemon.app import Daemon  # noqa: E402
from tests.support import AMQP_URL  # noqa: E402
from timer_service.clock import SystemClock  # noqa: E402
from timer_service.jobs import NewJob  # noqa: E402
from timer_service.metrics import Metrics  # noqa: E402
from timer_service.model import BizType  # noqa: E402
from timer_service.queue.amqp import AmqpQueue, exchange_name, queue_name  # noqa: E402
from timer_service.registration import Registrar  # noqa: E402
from timer_service.runtime import freeze_startup_heap  # noqa: E402
from timer_service.settings import Settings  # noqa: E402
from timer_service.store.memory import MemoryStore  # noqa: E402


class RecordingMetrics(Metrics):
    """Keeps every first-attempt send lateness, by biz type, besides the histograms."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[str, list[tuple[float, float]]] = {"herd": [], "steady": []}
        self.published: dict[str, list[tuple[float, float]]] = {"herd": [], "steady": []}

    def job_dispatched(self, biz_type: str, lateness_s: float) -> None:
        super().job_dispatched(biz_type, lateness_s)
        self.published[biz_type].append((time.time(), lateness_s * 1000))

    def callback_sent(self, biz_type: str, attempt: int, lateness_s: float) -> None:
        super().callback_sent(biz_type, attempt, lateness_s)
        if attempt == 1:
            self.sent[biz_type].append((time.time(), lateness_s * 1000))


def pct(values: list[float], p: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100)[int(p) - 1]


async def run(
    herd: int, steady_rate: int, lead_s: float, with_broker: bool = True, window_ms: int = 0
) -> None:
    receiver, port = start_receiver()
    prefix = f"herd{uuid.uuid4().hex[:8]}"
    store = MemoryStore(buckets=60)
    await store.setup()
    queue = AmqpQueue(AMQP_URL, prefix)
    await queue.connect()
    metrics = RecordingMetrics()
    clock = SystemClock()
    settings = Settings(_env_file=None, queue_prefix=prefix)  # type: ignore[call-arg]
    url = f"http://127.0.0.1:{port}/callback"
    for name in ("herd", "steady"):
        await store.biz_types.put_biz_type(BizType(name, url, max_concurrency=64))
    daemon = Daemon(settings, store, queue, metrics, clock)
    broker = Broker(settings, store, queue, metrics, clock)
    gc_pauses = GcPauses()
    try:
        now = clock.now_ms()
        herd_due = (now // 1000 + int(lead_s) + 1) * 1000  # a whole second, lead_s ahead
        t = time.perf_counter()
        registrar = Registrar(store.jobs, metrics, calendar=store.calendar)
        for chunk in range(0, herd, 5000):
            jobs = [
                NewJob("herd", f"h{i}", herd_due + i % 1000, "null", window_ms=window_ms)
                for i in range(chunk, min(herd, chunk + 5000))
            ]
            await registrar.register(jobs, clock.now_ms())
        steady_span_s = 60
        steady = [
            NewJob("steady", f"s{i}", herd_due - 2000 + int(i * 1000 / steady_rate), "null")
            for i in range(steady_span_s * steady_rate)
        ]
        await store.jobs.create_jobs(steady, clock.now_ms())
        took_s, ahead_s = time.perf_counter() - t, (herd_due - clock.now_ms()) / 1000
        print(
            f"registered {herd:,} herd + {len(steady):,} steady jobs in {took_s:.1f} s; "
            f"herd due in {ahead_s:.1f} s"
        )
        cpu0 = time.process_time()
        await daemon.start()
        if with_broker:
            await broker.start()
        # As every command does once started. It also freezes the in-memory store's
        # jobs, which a deployed daemon or broker does not hold at all (MongoDB does).
        freeze_startup_heap()
        gc_pauses.install()
        done = metrics.sent if with_broker else metrics.published
        deadline = time.monotonic() + 600
        while len(done["herd"]) < herd and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if not with_broker:
            await asyncio.sleep(3)  # the steady jobs due meanwhile
            last_ms = max(t for t, _ in done["herd"]) * 1000
            steady = [
                late
                for t, late in metrics.published["steady"]
                if herd_due / 1000 - 1 <= t <= last_ms / 1000 + 0.5
            ]
            took_s = (last_ms - herd_due) / 1000 + 1
            print(
                f"daemon alone: herd of {herd:,} published in {took_s:.1f} s"
                f" from its claim; steady publish - due p50 / max meanwhile: "
                f"{pct(steady, 50):.0f} / {max(steady):.0f} ms (negative: ahead)"
            )
            return
        last_ms = max(t for t, _ in metrics.sent["herd"]) * 1000
        cpu = time.process_time() - cpu0
        herd_late = [late for _, late in metrics.sent["herd"]]
        window = [
            late
            for t, late in metrics.sent["steady"]
            if herd_due / 1000 <= t <= last_ms / 1000 + 0.5
        ]
        print(
            f"\nherd of {herd:,} due at one second, window {window_ms} ms;"
            f" steady biz type at {steady_rate}/s"
        )
        print("| what | value |\n|---|---|")
        drain_s = (last_ms - herd_due) / 1000
        print(f"| last herd callback sent after the herd's second began | {drain_s:.1f} s |")
        print(f"| herd throughput | {herd / ((last_ms - herd_due) / 1000):,.0f} callbacks/s |")
        p50, p99 = pct(herd_late, 50), pct(herd_late, 99)
        print(
            f"| herd send lateness p50 / p99 / max | {p50:.0f} / {p99:.0f} / "
            f"{max(herd_late):.0f} ms |"
        )
        published = [
            late
            for t, late in metrics.published["steady"]
            if herd_due / 1000 <= t <= last_ms / 1000 + 0.5
        ]
        if published:
            print(
                f"| steady biz type meanwhile: publish - due p50 / max | "
                f"{pct(published, 50):.0f} / {max(published):.0f} ms (negative: ahead) |"
            )
        if window:
            print(
                f"| steady biz type meanwhile ({len(window)} callbacks) p50 / p99 / max | "
                f"{pct(window, 50):.0f} / {pct(window, 99):.0f} / {max(window):.0f} ms |"
            )
        print(f"| daemon+broker+store CPU | {cpu:.1f} s ({cpu * 1e6 / herd:.0f} µs per herd job) |")
        pauses = gc_pauses.pauses_ms
        print(
            f"| full GC pauses (each stops daemon and broker) | {len(pauses)}, "
            f"max {max(pauses, default=0.0):.0f} ms |"
        )
    finally:
        gc_pauses.remove()
        await broker.stop()
        await daemon.stop()
        connection = await aio_pika.connect_robust(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            for name in ("herd", "steady"):
                await channel.queue_delete(queue_name(prefix, name))
            await channel.exchange_delete(exchange_name(prefix))
        await queue.close()
        receiver.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--herd", type=int, default=100_000)
    parser.add_argument("--steady-rate", type=int, default=100)
    parser.add_argument("--lead-s", type=float, default=8.0)
    parser.add_argument("--daemon-only", action="store_true", help="no broker: publishing alone")
    parser.add_argument("--window-ms", type=int, default=0, help="the herd's flexible window")
    args = parser.parse_args()
    asyncio.run(run(args.herd, args.steady_rate, args.lead_s, not args.daemon_only, args.window_ms))


if __name__ == "__main__":
    main()
