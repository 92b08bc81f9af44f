"""A burst of concurrent creates, all fired at once, and what the service answered.

Shared by tests/e2e/test_stress_overload.py (the issue's "Done when": 5,000 creates, every
answer within 10 s) and bench/overload_bench.py (the same, three runs, the figures).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pymongo import MongoClient

CLIENT_TIMEOUT_S = 60.0  # far beyond the bound: a late answer is measured, not cut off
SHED_STATUSES = (429, 503)


@dataclass(frozen=True)
class Answer:
    job_id: str
    status: int
    after_s: float  # from the burst's start to the answer's arrival
    retry_after: str | None
    # From the request's last byte sent to its answer: the service's answer time. The
    # rest of `after_s` is this one client process opening thousands of connections
    # (~3 s of them on a loaded 2-core machine), which a real burst spreads over many.
    latency_s: float


@dataclass
class BurstResult:
    answers: list[Answer] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # transport errors by kind
    wall_s: float = 0.0

    @property
    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.answers)

    @property
    def created(self) -> set[str]:
        return {a.job_id for a in self.answers if a.status == 201}

    def quantile_s(self, q: float, since_burst: bool = False) -> float:
        ordered = sorted(a.after_s if since_burst else a.latency_s for a in self.answers)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    @property
    def max_s(self) -> float:
        return max((a.latency_s for a in self.answers), default=float("nan"))

    @property
    def max_since_burst_s(self) -> float:
        return max((a.after_s for a in self.answers), default=float("nan"))

    @property
    def answered_per_s(self) -> float:
        return len(self.answers) / self.wall_s if self.wall_s else 0.0

    def shed_without_retry_after(self) -> list[Answer]:
        return [a for a in self.answers if a.status in SHED_STATUSES and not a.retry_after]

    def summary(self) -> str:
        counts = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.items()))
        return (
            f"{len(self.answers)} answered in {self.wall_s:.1f} s ({self.answered_per_s:.0f}/s);"
            f" {counts}; errors {dict(self.errors) or 'none'}; answer time (request sent"
            f" -> answer) p50 {self.quantile_s(0.5):.2f} s, p99 {self.quantile_s(0.99):.2f} s,"
            f" max {self.max_s:.2f} s; since the burst began p50"
            f" {self.quantile_s(0.5, since_burst=True):.2f} s, max"
            f" {self.max_since_burst_s:.2f} s"
        )


async def fire_burst(
    base_url: str, biz_type: str, count: int, *, delay_ms: int, run_id: str
) -> BurstResult:
    """`count` creates at once, each on its own connection, as many clients would.

    A bare HTTP/1.1 client on asyncio streams: on this 2-core machine aiohttp's own
    work for 5,000 connections took longer than the server's (a server that answers
    at once was answered in 17 s by aiohttp, 7 s by this), and the figure is the
    service's, not the client's."""
    result = BurstResult()
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    started = time.monotonic()

    async def create(n: int) -> None:
        job_id = f"{run_id}-{n}"
        body = json.dumps({"biz_type": biz_type, "job_id": job_id, "delay_ms": delay_ms})
        request = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n{body}"
        ).encode()
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(request)
                    await writer.drain()
                    sent = time.monotonic()
                    answer = await reader.read()
                finally:
                    writer.close()
            answered = time.monotonic()
            head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            status = int(head[0].split()[1])
            headers = dict(line.lower().split(": ", 1) for line in head[1:] if ": " in line)
            retry_after = headers.get("retry-after")
            latency_s = answered - sent
            result.answers.append(
                Answer(job_id, status, answered - started, retry_after, latency_s)
            )
        except (OSError, TimeoutError, IndexError, ValueError) as exc:
            result.errors[type(exc).__name__] += 1

    await asyncio.gather(*(create(n) for n in range(count)))
    result.wall_s = time.monotonic() - started
    return result


def rss_mb(pid: int) -> float:
    """A process's resident memory now (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def lease_fence(mongo_url: str, db_name: str, lease: str = "daemon-p0") -> int | None:
    """The fencing token of the daemon's lease document: it grows on every takeover."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        doc = client[db_name]["leases"].find_one({"_id": lease})
    finally:
        client.close()
    return None if doc is None else int(doc["token"])
