"""Registration load on `timer-service api` over SecantusDB while jobs fire.

Creates jobs as fast as the API takes them (batches of 100 and single creates from
concurrent aiohttp clients) for --duration seconds while GET /healthz is polled every
50 ms; with a `timer-service daemon` and `broker` on RabbitMQ delivering them to a
local receiver meanwhile (each job is due --delay-ms after its creation). Prints
jobs/s and healthz p50/p99/max as a table.

    .venv/bin/python bench/api_load_bench.py [--duration 60] [--delay-ms 2000] [--drain 30]
                                             [--api-only]

Without a reachable RabbitMQ, or when the daemon or broker does not start, the load
runs against the API alone and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.badinput.loadgen import run_load  # noqa: E402
from tests.e2e.harness import Receiver, Service  # noqa: E402
from tests.support import AMQP_URL, SecantusServer, free_port, unique_name  # noqa: E402

BIZ = "bench-load"


def amqp_reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2):
            return True
    except OSError:
        return False


def start_pipeline(env: dict[str, str]) -> tuple[list[Service], str | None]:
    """The daemon and broker, or why they are not running."""
    if not amqp_reachable(env["TIMER_AMQP_URL"]):
        return [], f"RabbitMQ not reachable at {env['TIMER_AMQP_URL']}"
    started: list[Service] = []
    for command in ("daemon", "broker"):
        port = free_port()
        service = Service(command, {**env, "TIMER_METRICS_PORT": str(port)}, port)
        try:
            started.append(service.start(timeout_s=60))
        except Exception as exc:
            service.stop_quietly()
            for running in started:
                running.stop_quietly()
            return [], f"timer-service {command} did not start: {exc}"
    return started, None


async def wait_for_arrivals(receiver: Receiver, count: int, timeout_s: float) -> None:
    enough = asyncio.Event()

    def check(_: object = None) -> None:
        if len(receiver.arrivals) >= count:
            enough.set()

    receiver.on_arrival = check
    check()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(enough.wait(), timeout_s)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--delay-ms", type=int, default=2000, help="each job's delay")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to await callbacks")
    parser.add_argument("--batch-clients", type=int, default=2)
    parser.add_argument("--single-clients", type=int, default=4)
    parser.add_argument("--api-only", action="store_true", help="no daemon or broker")
    args = parser.parse_args()

    secantus = SecantusServer()
    secantus.start()
    receiver = Receiver()
    await receiver.start()
    api_port = free_port()
    env = {
        "TIMER_MONGO_URL": secantus.url,
        "TIMER_MONGO_DB": unique_name("loadbench"),
        "TIMER_AMQP_URL": AMQP_URL,
        "TIMER_QUEUE_PREFIX": unique_name("loadbench"),
        "TIMER_LOG_LEVEL": "WARNING",
        "TIMER_SHUTDOWN_GRACE_S": "5",
    }
    api = Service("api", {**env, "TIMER_HTTP_PORT": str(api_port)}, api_port)
    pipeline: list[Service] = []
    try:
        api.start()
        base_url = f"http://127.0.0.1:{api_port}"
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            r = await client.put(f"/v1/biz-types/{BIZ}", json={"callback_url": receiver.url})
            r.raise_for_status()
        why_not = "--api-only" if args.api_only else None
        if not args.api_only:
            pipeline, why_not = start_pipeline(env)
        if why_not:
            print(f"SKIPPED the daemon and broker ({why_not}); registering against the API only")
        label = "api + daemon + broker" if pipeline else "api only"

        result = await run_load(
            base_url,
            BIZ,
            args.duration,
            batch_clients=args.batch_clients,
            single_clients=args.single_clients,
            delay_ms=args.delay_ms,
            run_id=unique_name("job"),
        )
        during_load = len(receiver.arrivals)
        if pipeline:
            await wait_for_arrivals(receiver, result.jobs_created, args.drain)
        print()
        print(result.table(f"{label}, SecantusDB, jobs due {args.delay_ms} ms after creation"))
        if pipeline:
            late = sorted(a.at_ms - a.due_at for a in receiver.arrivals if a.attempt == 1)
            p99 = late[min(len(late) - 1, int(0.99 * len(late)))] if late else float("nan")
            print(f"{'callbacks during load':<22}  {during_load}")
            print(
                f"{'callbacks after drain':<22}  {len(receiver.arrivals)} of "
                f"{result.jobs_created} (drain {args.drain:.0f} s)"
            )
            print(f"{'callback lateness p99':<22}  {p99} ms (received - due)")
    finally:
        for service in (*reversed(pipeline), api):
            service.stop_quietly()
        await receiver.stop()
        secantus.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
