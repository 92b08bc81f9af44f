"""Delivery lateness of two peers, Celery ETA tasks and arq deferred jobs, beside ours.

The same measurement as bench/lateness_bench.py, by the same harness: jobs
registered ahead (the first due `--lead` s later), due evenly at `--rate` per
second for `--seconds`; a worker in a subprocess POSTs each job's callback to
the same receiver (lateness_bench's `serve` mode, a separate process that
notes `time.time_ns()` as a request's bytes arrive); per job lateness =
arrival - due. The body and headers are ours, built by
`broker.callback.build_request` (same JSON, Standard Webhooks signature) with
`fired_at` stamped when the task starts its POST. Printed per run and as the
median of the runs: p50 / p99 / max / min, early, missing, duplicates; send -
due from the body's `fired_at` (whole ms); the worker's CPU per job (its
process and any children, /proc/<pid>/stat, from the worker being ready to the
last callback in, registration included); the CPU of the whole RabbitMQ or
Redis server per job over the same span (shared with anything else using it).

- **Celery** 5.6 (`--peer celery`): `send_task(..., eta=due)` to RabbitMQ
  (classic durable queue and direct exchange named `peers-celery-<run>`, both
  deleted after the run), no result backend, a worker started as
  `worker --pool threads --concurrency 10 --without-gossip --without-mingle
  --without-heartbeat` (remote control off), the task POSTs with `requests`
  (a Session per thread, keep-alive, no proxy from the environment, no
  redirects, 10 s timeout). A message with an ETA is delivered to a worker at
  once and held in that worker's memory, unacknowledged, until due (the worker
  raises its prefetch count for each one); a timer on the worker's event loop
  then hands it to the pool. So every job registered ahead sits in one
  worker's RAM; a job further out than RabbitMQ's `consumer_timeout` (30 min
  by default) gets the channel closed; the held messages are redelivered if
  the worker dies (acked only when the task starts: default
  `task_acks_late=False`, so a crash mid-POST loses that job).
- **arq** 0.28 (`--peer arq`): `enqueue_job(..., _defer_until=due)` into a
  Redis sorted set named `peers-arq-<run>` (score = due ms; the job under
  `arq:job:<id>`; every key of the run deleted after it), a worker
  `Worker(max_jobs=10, keep_result=0, poll_delay=--arq-poll-delay)` that every
  poll_delay asks Redis for the jobs with score <= now, then starts each in an
  asyncio task that POSTs with aiohttp (one session, settings as our
  broker's Sender: no connection limit, no decompression, no proxy from the
  environment, no redirects; 10 s timeout). arq's default poll_delay is 0.5 s,
  so a job waits up to that long after due before it is even picked, and a
  poll starts the jobs it found one after another (a Redis transaction each);
  the README rows give poll_delay 0.5 s and 0.05 s.

What each is and is not beside the service. Celery has a per-task
`rate_limit`, but each worker enforces it on its own (N workers: up to N times
it), and `revoke`, broadcast to the live workers and kept in their memory
(lost on a restart unless `--statedb`); arq has `max_jobs` per worker and no
rate limit, and `Job.abort()` (with `allow_abort_jobs`), which also takes out
a deferred job. Neither reschedules a registered job, retries on the
callback's HTTP status with Retry-After (a task can raise Retry, by hand),
keeps a queryable record of each job and its attempts, replays dead jobs,
signs callbacks (here the task signs with our code) or checks targets against
private addresses. Durability: Celery's ETA message is persistent in a durable
queue and unacknowledged while held, so RabbitMQ redelivers it if the worker
dies, but it lives in one worker's RAM until due; arq's jobs are as durable as
the Redis server's persistence (here none: `appendonly no`, `save ""`). This
bench measures only the time from due to the callback, and what the worker
spends on it.

    .venv/bin/python bench/peers_bench.py --peer all --rate 100 --seconds 10 --runs 3
    .venv/bin/python bench/peers_bench.py --peer arq --arq-poll-delay 0.05 --runs 3

Needs the optional extra `peers` (pyproject.toml): celery, arq and what they pull.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.callback import build_request  # noqa: E402
from timer_service.model import BizType, Job, JobState  # noqa: E402

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
BIZ = "peers"
SECRET = "bench-signing-secret"
PAYLOAD = '{"n":1}'
TASK = "peers.post"
TIMEOUT_S = 10.0
WAIT_AFTER_LAST_S = 30.0
SERVERS = {"celery": (5672, "RabbitMQ"), "arq": (REDIS_PORT, "Redis")}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=4)
def _biz(url: str) -> BizType:
    return BizType(BIZ, url, max_concurrency=256, signing_secret=SECRET)


def callback(url: str, job_id: str, due_at: int) -> tuple[bytes, dict[str, str]]:
    """Our callback's body and headers for attempt 1, fired now."""
    job = Job(BIZ, job_id, due_at, PAYLOAD, JobState.DISPATCHED, 0, None, 0, 0)
    request = build_request(_biz(url), job, 1, now_ms())
    return request.body, request.headers


# -- Celery --------------------------------------------------------------------------------


def celery_app(queue: str) -> Any:
    from celery import Celery

    app = Celery("peers", broker=AMQP_URL, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_ignore_result=True,
        result_backend=None,
        worker_enable_remote_control=False,
        broker_connection_retry_on_startup=True,
    )
    return app


def celery_worker(queue: str, concurrency: int, pool: str, ready: str) -> None:
    import requests
    from celery.signals import worker_ready

    # The bench runs as root here; Celery warns about that on every start.
    warnings.filterwarnings("ignore", message=".*superuser privileges")
    app = celery_app(queue)
    local = threading.local()

    @app.task(name=TASK, ignore_result=True)
    def post(url: str, job_id: str, due_at: int) -> None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
            session.trust_env = False
        body, headers = callback(url, job_id, due_at)
        resp = session.post(
            url, data=body, headers=headers, timeout=TIMEOUT_S, allow_redirects=False
        )
        resp.close()

    worker_ready.connect(lambda **_: Path(ready).touch(), weak=False)
    app.worker_main(
        [
            "--quiet",  # no banner per run
            "worker",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            f"--queues={queue}",
            f"--hostname={queue}@%h",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )


def celery_register(queue: str, url: str, jobs: list[tuple[str, int]]) -> None:
    app = celery_app(queue)
    with app.producer_or_acquire() as producer:
        for job_id, due in jobs:
            eta = datetime.fromtimestamp(due / 1000, tz=UTC)
            app.send_task(TASK, args=[url, job_id, due], eta=eta, queue=queue, producer=producer)


def celery_cleanup(queue: str, run: str) -> None:
    app = celery_app(queue)
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


# -- arq -----------------------------------------------------------------------------------


def arq_worker(queue: str, concurrency: int, poll_delay: float, ready: str) -> None:
    import aiohttp
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    async def startup(ctx: dict[str, Any]) -> None:
        ctx["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
            trust_env=False,
        )
        Path(ready).touch()

    async def shutdown(ctx: dict[str, Any]) -> None:
        await ctx["session"].close()

    async def post(ctx: dict[str, Any], url: str, job_id: str, due_at: int) -> None:
        body, headers = callback(url, job_id, due_at)
        async with ctx["session"].post(
            url, data=body, headers=headers, allow_redirects=False
        ) as resp:
            await resp.content.read(64 * 1024)

    worker = Worker(
        functions=[func(post, name=TASK, max_tries=1)],
        queue_name=queue,
        redis_settings=RedisSettings(host=REDIS_HOST, port=REDIS_PORT),
        max_jobs=concurrency,
        keep_result=0,
        poll_delay=poll_delay,
        on_startup=startup,
        on_shutdown=shutdown,
    )
    worker.run()


async def arq_register(queue: str, url: str, jobs: list[tuple[str, int]]) -> None:
    from arq.connections import RedisSettings, create_pool

    pool = await create_pool(RedisSettings(host=REDIS_HOST, port=REDIS_PORT))
    try:
        for job_id, due in jobs:
            await pool.enqueue_job(
                TASK,
                url,
                job_id,
                due,
                _job_id=job_id,
                _queue_name=queue,
                _defer_until=datetime.fromtimestamp(due / 1000, tz=UTC),
            )
    finally:
        await pool.aclose()


async def arq_cleanup(queue: str, run: str) -> None:
    from redis.asyncio import Redis

    redis = Redis(host=REDIS_HOST, port=REDIS_PORT)
    try:
        keys = [key async for key in redis.scan_iter(match=f"arq:*:{run}-*", count=1000)]
        keys += [key async for key in redis.scan_iter(match=f"{queue}*", count=1000)]
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()


# -- the harness (this process) ------------------------------------------------------------


def tree_cpu_s(pid: int) -> float:
    """utime + stime of a process and its live descendants (a prefork pool's children)."""
    from _common import process_cpu_s

    try:
        total = process_cpu_s(pid)
    except OSError:
        return 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        total += sum(tree_cpu_s(int(child)) for child in children)
    return total


def listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:`port` (the RabbitMQ or Redis server; by port,
    since `beam.smp` is also the name of every rabbitmqctl run)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                    return int(entry.name)
            except OSError:
                continue
    return None


def start_worker(peer: str, queue: str, args: argparse.Namespace, ready: Path) -> Any:
    cmd = [sys.executable, os.path.abspath(__file__), f"{peer}-worker", "--queue", queue]
    cmd += ["--concurrency", str(args.concurrency), "--ready", str(ready)]
    cmd += ["--celery-pool", args.celery_pool, "--arq-poll-delay", str(args.arq_poll_delay)]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the {peer} worker did not start")
        time.sleep(0.05)
    return proc


def stop_worker(proc: Any) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def one_run(
    peer: str, rate: int, seconds: float, lead_s: float, port: int, args: argparse.Namespace
) -> dict[str, float]:
    from _common import process_cpu_s
    from lateness_bench import fetch_arrivals, first_arrival_figures

    run = uuid.uuid4().hex[:8]
    queue = f"peers-{peer}-{run}"
    url = f"http://127.0.0.1:{port}/callback"
    ready = Path(tempfile.gettempdir()) / f"{queue}.ready"
    await fetch_arrivals(port)  # forget anything from an earlier run
    server = listener_pid(SERVERS[peer][0])
    worker = start_worker(peer, queue, args, ready)
    rows: list[list[Any]] = []
    count = int(rate * seconds)
    try:
        cpu0 = tree_cpu_s(worker.pid)
        server0 = process_cpu_s(server) if server else 0.0
        first_due = now_ms() + int(lead_s * 1000)
        jobs = [(f"{run}-{i}", first_due + i * 1000 // rate) for i in range(count)]
        due = dict(jobs)
        t = time.perf_counter()
        if peer == "celery":
            celery_register(queue, url, jobs)
        else:
            await arq_register(queue, url, jobs)
        took_s, ahead_s = time.perf_counter() - t, (first_due - now_ms()) / 1000
        print(f"    registered {count} jobs in {took_s:.2f} s; first due in {ahead_s:.2f} s")
        if ahead_s < 1.0:
            print("    WARNING: registration ate the lead; raise --lead")
        deadline = jobs[-1][1] / 1000 + WAIT_AFTER_LAST_S
        seen: set[str] = set()
        while len(seen) < count and time.time() < deadline:
            await asyncio.sleep(0.1)
            fresh = await fetch_arrivals(port)
            rows += fresh
            seen.update(row[0] for row in fresh if row[0] in due)
        await asyncio.sleep(0.5)  # the last tasks' acks / finish writes
        cpu = tree_cpu_s(worker.pid) - cpu0
        server_cpu = process_cpu_s(server) - server0 if server else 0.0
        rows += await fetch_arrivals(port)
    finally:
        stop_worker(worker)
        ready.unlink(missing_ok=True)
        if peer == "celery":
            celery_cleanup(queue, run)
        else:
            await arq_cleanup(queue, run)

    return {
        **first_arrival_figures(rows, due),
        "cpu_us": cpu / count * 1e6,
        "server_cpu_us": server_cpu / count * 1e6,
    }


def show(label: str, r: dict[str, float], peer: str) -> str:
    return (
        f"{label}: {int(r['received'])}/{int(r['jobs'])} received, lateness p50 "
        f"{r['p50']:.2f} p99 {r['p99']:.2f} max {r['max']:.1f} min {r['min']:.2f} ms; "
        f"{int(r['early'])} early, {int(r['missing'])} missing, "
        f"{int(r['duplicates'])} duplicate; >5 ms {int(r['over5'])}, >50 ms {int(r['over50'])}\n"
        f"      send - due p50/p99/max {r['send_p50']:.0f}/{r['send_p99']:.0f}/"
        f"{r['send_max']:.0f} ms; arrival - send p50/p99 {r['wire_p50']:.2f}/"
        f"{r['wire_p99']:.2f} ms\n"
        f"      worker CPU {r['cpu_us']:.0f} µs/job; {SERVERS[peer][1]} server "
        f"{r['server_cpu_us']:.0f} µs/job (the whole server, shared)"
    )


def describe(peer: str, args: argparse.Namespace) -> str:
    if peer == "celery":
        how = f"ETA tasks, RabbitMQ, --pool {args.celery_pool}"
    else:
        how = f"_defer_until, Redis, poll_delay {args.arq_poll_delay:g} s"
    return (
        f"{peer} ({how}, concurrency {args.concurrency}): {args.rate} jobs/s for "
        f"{args.seconds:g} s, registered ahead, first due {args.lead:g} s after registration"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    modes = ["bench", "celery-worker", "arq-worker"]
    parser.add_argument("mode", nargs="?", default="bench", choices=modes)
    parser.add_argument("--peer", choices=["celery", "arq", "all"], default="all")
    parser.add_argument("--rate", type=int, default=100, help="jobs due per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="span of due moments")
    parser.add_argument("--lead", type=float, default=5.0, help="s from registration to first due")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10, help="worker threads / max_jobs")
    parser.add_argument("--celery-pool", choices=["threads", "prefork"], default="threads")
    parser.add_argument("--arq-poll-delay", type=float, default=0.5, help="s (arq's default)")
    parser.add_argument("--queue", help="worker modes: the queue")
    parser.add_argument("--ready", help="worker modes: a file to create once ready")
    args = parser.parse_args()
    if args.mode == "celery-worker":
        celery_worker(args.queue, args.concurrency, args.celery_pool, args.ready)
        return
    if args.mode == "arq-worker":
        arq_worker(args.queue, args.concurrency, args.arq_poll_delay, args.ready)
        return
    from lateness_bench import start_receiver

    receiver, port = start_receiver()
    try:
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}", flush=True)
        for peer in ["celery", "arq"] if args.peer == "all" else [args.peer]:
            print(describe(peer, args), flush=True)
            results = []
            for i in range(args.runs):
                result = asyncio.run(one_run(peer, args.rate, args.seconds, args.lead, port, args))
                print(show(f"  run {i + 1}", result, peer), flush=True)
                results.append(result)
            median = {k: statistics.median(r[k] for r in results) for k in results[0]}
            print(show(f"{peer} median of {args.runs}", median, peer), flush=True)
        print(f"load average: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    finally:
        receiver.terminate()
        receiver.wait()


if __name__ == "__main__":
    main()
