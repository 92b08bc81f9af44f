"""Registration load against a running API while /healthz is polled: how many jobs per
second it sustains, and how long a liveness probe waits meanwhile.

Shared by tests/badinput/test_api_load.py (short) and bench/api_load_bench.py (long).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

BATCH_SIZE = 100
HEALTH_PERIOD_S = 0.05
REQUEST_TIMEOUT_S = 30.0


@dataclass
class LoadResult:
    duration_s: float
    jobs_created: int = 0
    requests: Counter[int] = field(default_factory=Counter)  # status -> count
    item_statuses: Counter[int] = field(default_factory=Counter)  # batch item status -> count
    errors: Counter[str] = field(default_factory=Counter)  # transport errors by kind
    health_ms: list[float] = field(default_factory=list)
    health_failures: int = 0

    @property
    def jobs_per_s(self) -> float:
        return self.jobs_created / self.duration_s

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.requests.items() if status >= 500) + sum(
            n for status, n in self.item_statuses.items() if status >= 500
        )

    def health_quantile_ms(self, q: float) -> float:
        ordered = sorted(self.health_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def health_max_ms(self) -> float:
        return max(self.health_ms, default=float("nan"))

    def table(self, label: str) -> str:
        rows = [
            ("run", label),
            ("duration", f"{self.duration_s:.1f} s"),
            ("jobs created", f"{self.jobs_created}"),
            ("jobs/s", f"{self.jobs_per_s:.0f}"),
            ("requests by status", _counts(self.requests)),
            ("batch items by status", _counts(self.item_statuses)),
            ("transport errors", _counts(self.errors) or "none"),
            ("healthz probes", f"{len(self.health_ms)} ({self.health_failures} failed)"),
            ("healthz p50", f"{self.health_quantile_ms(0.50):.1f} ms"),
            ("healthz p99", f"{self.health_quantile_ms(0.99):.1f} ms"),
            ("healthz max", f"{self.health_max_ms:.1f} ms"),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _counts(counter: Counter[int] | Counter[str]) -> str:
    return ", ".join(f"{key}: {n}" for key, n in sorted(counter.items(), key=str))


async def run_load(
    base_url: str,
    biz_type: str,
    duration_s: float,
    *,
    batch_clients: int = 2,
    single_clients: int = 4,
    delay_ms: int = 3_600_000,
    run_id: str = "load",
) -> LoadResult:
    """Creates jobs as fast as the API takes them for `duration_s` (batches of 100 and
    single creates from concurrent clients), polling /healthz every 50 ms meanwhile.

    Each job is due `delay_ms` after its creation."""
    result = LoadResult(duration_s)
    deadline = time.monotonic() + duration_s
    ids = itertools.count()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    def job() -> dict[str, object]:
        n = next(ids)
        return {
            "biz_type": biz_type,
            "job_id": f"{run_id}-{n}",
            "delay_ms": delay_ms,
            "payload": {"n": n},
        }

    async def batches(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            body = {"jobs": [job() for _ in range(BATCH_SIZE)]}
            try:
                async with session.post(f"{base_url}/v1/jobs:batch", json=body) as r:
                    result.requests[r.status] += 1
                    if r.status == 200:
                        items = (await r.json())["results"]
                        for item in items:
                            result.item_statuses[item["status"]] += 1
                        result.jobs_created += sum(1 for item in items if item["status"] == 201)
                    else:
                        await r.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                result.errors[type(exc).__name__] += 1

    async def singles(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            try:
                async with session.post(f"{base_url}/v1/jobs", json=job()) as r:
                    result.requests[r.status] += 1
                    await r.read()
                    if r.status == 201:
                        result.jobs_created += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                result.errors[type(exc).__name__] += 1

    async def health() -> None:
        # Its own connection, as an orchestrator's probe would have.
        async with aiohttp.ClientSession(timeout=timeout) as session:
            next_at = time.monotonic()
            while next_at < deadline:
                started = time.monotonic()
                try:
                    async with session.get(f"{base_url}/healthz") as r:
                        await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                elapsed_ms = (time.monotonic() - started) * 1000
                result.health_ms.append(elapsed_ms)
                result.health_failures += 0 if ok else 1
                next_at = max(next_at + HEALTH_PERIOD_S, time.monotonic())
                await asyncio.sleep(next_at - time.monotonic())

    connector = aiohttp.TCPConnector(limit=batch_clients + single_clients)
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(
            health(),
            *(batches(session) for _ in range(batch_clients)),
            *(singles(session) for _ in range(single_clients)),
        )
    result.duration_s = time.monotonic() - started
    return result


def summary_line(result: LoadResult) -> str:
    return (
        f"{result.jobs_per_s:.0f} jobs/s; healthz p50 {result.health_quantile_ms(0.5):.1f} ms, "
        f"p99 {result.health_quantile_ms(0.99):.1f} ms, max {result.health_max_ms:.1f} ms "
        f"over {len(result.health_ms)} probes"
    )
