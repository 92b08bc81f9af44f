"""CPU per message of consuming and acking over RabbitMQ: acks one at a time, or together.

The broker acks a batch of messages once their outcomes are stored (64 at a time
at a steady rate, broker/outcomes.py). This bench does only that: publish
`--messages` jobs to a quorum queue of its own, consume them (prefetch 500) and
ack them in batches of `--batch` the way the adapter does now (`delivery.ack()`
for each, sent as one `multiple=True` frame per loop turn where it may,
timer_service/queue/amqp_acks.py) or the way it did (`message.ack()` awaited for
each, a frame each). Printed: this process's CPU per message from the first
delivery to the last ack written, per mode, alternating modes run by run, and the
RabbitMQ server's CPU per message (the whole server, shared).

    .venv/bin/python bench/ack_bench.py --messages 5000 --runs 4
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

from _common import process_cpu_s, rabbitmq_pid  # noqa: E402

from tests.support import AMQP_URL, drop_topology  # noqa: E402
from timer_service.dispatch import Claimed  # noqa: E402
from timer_service.queue.amqp import AmqpDelivery, AmqpQueue  # noqa: E402
from timer_service.queue.base import Delivery  # noqa: E402

BIZ = "acks"


async def one_run(mode: str, messages: int, batch: int) -> tuple[float, float]:
    prefix = f"bench-acks-{uuid.uuid4().hex[:6]}"
    queue = AmqpQueue(AMQP_URL, prefix)
    await queue.connect()
    try:
        await queue.ensure_biz(BIZ)
        jobs = [Claimed(BIZ, f"j{i}", 1, 1000, 1000, 1, f"c{i}") for i in range(messages)]
        for i in range(0, messages, 500):
            await queue.publish(jobs[i : i + 500])
        waiting: list[Delivery] = []
        acked = 0
        taken = 0  # handed to an ack task
        done = asyncio.Event()
        started: list[float] = []
        rabbit = rabbitmq_pid()
        rabbit_started: list[float] = []
        acking: set[asyncio.Task[None]] = set()

        async def ack_batch(deliveries: list[Delivery]) -> None:
            nonlocal acked
            for delivery in deliveries:
                if mode == "together":
                    await delivery.ack()
                else:
                    assert isinstance(delivery, AmqpDelivery)
                    await delivery._message.ack()
            acked += len(deliveries)
            if acked == messages:
                done.set()

        async def handler(delivery: Delivery) -> None:
            if not started:
                started.append(time.process_time())
                rabbit_started.append(process_cpu_s(rabbit) if rabbit else 0.0)
            waiting.append(delivery)
            nonlocal taken
            if len(waiting) >= batch or taken + len(waiting) == messages:
                # In a task of its own, as the outcome writer's acks are.
                deliveries = waiting[:]
                waiting.clear()
                taken += len(deliveries)
                acking.add(asyncio.create_task(ack_batch(deliveries)))

        consumer = await queue.consume(BIZ, handler, prefetch=500)
        await asyncio.wait_for(done.wait(), 120)
        await consumer.cancel()  # flushes the last acks, then closes the channel
        cpu = time.process_time() - started[0]
        rabbit_cpu = process_cpu_s(rabbit) - rabbit_started[0] if rabbit else float("nan")
        depth = await queue.queue_depth(BIZ)
        assert depth == 0, f"{depth} messages left unacked"
        return cpu / messages * 1e6, rabbit_cpu / messages * 1e6
    finally:
        await queue.close()
        await drop_topology(prefix)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"one by one": [], "together": []}
    for i in range(args.runs):
        order = ("one by one", "together") if i % 2 == 0 else ("together", "one by one")
        for mode in order:
            us, rabbit_us = asyncio.run(one_run(mode, args.messages, args.batch))
            results[mode].append((us, rabbit_us))
            print(f"  {mode}: {us:.1f} µs/message (RabbitMQ {rabbit_us:.1f})", flush=True)
    for mode, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        rabbit = statistics.median(r[1] for r in runs)
        print(f"{mode}: median {cpu:.1f} µs/message, RabbitMQ {rabbit:.1f} µs/message")


if __name__ == "__main__":
    main()
