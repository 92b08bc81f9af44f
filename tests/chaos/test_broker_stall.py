"""The contract's failover line on the real processes (issue 30, break 9): a broker
frozen 30 s (SIGSTOP) has its biz types served by the other broker within 15 s, and,
resumed (SIGCONT), sends nothing twice.

How it holds: the frozen broker's AMQP connection goes silent, and RabbitMQ closes it
after about two heartbeats (the queue adapter asks for 5 s), which moves each of its
queues' single active consumer to the other broker; that one subscribed once the frozen
broker's store heartbeat lapsed (6 s). The frozen broker, resumed, finds its lease ran
out on its monotonic clock: it sends nothing it held or marked, lets go of its lanes,
and the send marks of the new owner carry a newer ownership epoch than any it had.

Before the fix: the frozen broker stayed the active consumer until RabbitMQ's default
60 s heartbeat gave up on it (jobs due in a 75 s freeze up to 78 s late), and after a
40 s freeze it sent two jobs that the leader had republished meanwhile a second time.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter

import httpx
import pytest

from tests.chaos.conftest import Chaos
from tests.chaos.test_chaos import put_biz
from tests.e2e.harness import Service, now_ms
from tests.support import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BIZ_TYPES = 6  # spread over the two brokers by rendezvous hashing
FROZEN_S = 30.0
TAKEOVER_MS = 15_000  # the contract's bound, with the default settings
# On a loaded 2-core machine a callback sent at its moment (or at the bound) may be
# received this much later: the API, two daemons, two brokers, the store and the
# receiver share the cores with the rest of the machine's load.
SLACK_MS = 3_000
SPACING_MS = 250  # one job of each biz type every this often
QUIET_AROUND_STOP_MS = 1_000  # no job due this close to the SIGSTOP: see the docstring


def consumed_by(service: Service) -> set[str]:
    text = service.metrics()
    return set(re.findall(r'^timer_broker_consuming\{biz_type="([^"]+)"\} 1', text, re.M))


async def owners(chaos: Chaos, biz_types: list[str]) -> dict[str, str]:
    """Each biz type's broker, once each is consumed by exactly one."""
    deadline = time.monotonic() + 30
    while True:
        seen = {name: consumed_by(chaos.service(name)) for name in ("broker-a", "broker-b")}
        owner = {b: [n for n, held in seen.items() if b in held] for b in biz_types}
        if all(len(names) == 1 for names in owner.values()):
            return {b: names[0] for b, names in owner.items()}
        assert time.monotonic() < deadline, f"biz types not settled on one broker: {owner}"
        await asyncio.sleep(0.5)


async def test_a_broker_frozen_30s_is_replaced_within_15s_and_sends_nothing_twice(
    chaos: Chaos,
) -> None:
    biz_types = [unique_name(f"frozen{i}") for i in range(BIZ_TYPES)]
    async with httpx.AsyncClient(base_url=chaos.api_url, timeout=30) as api:
        for biz in biz_types:
            await put_biz(api, biz, chaos.receiver.url)
        owner = await owners(chaos, biz_types)
        frozen_name = max(("broker-a", "broker-b"), key=list(owner.values()).count)
        theirs = [b for b in biz_types if owner[b] == frozen_name]
        chaos.progress(f"{frozen_name} consumes {len(theirs)} of {BIZ_TYPES} biz types")
        # A first job of each: the streams flow before the freeze.
        warm = [{"biz_type": b, "job_id": "warm", "delay_ms": 0} for b in biz_types]
        r = await api.post("/v1/jobs:batch", json={"jobs": warm})
        assert r.status_code == 200, r.text
        await wait_for(chaos, {(b, "warm") for b in biz_types}, 30)
        # Jobs due through the freeze and 10 s beyond, none within a second of the
        # SIGSTOP: a callback on the wire at that moment is the crash window of
        # at-least-once (sent, no outcome stored), not what this test is about.
        stop_at_ms = now_ms() + 3_000
        first_due = stop_at_ms + QUIET_AROUND_STOP_MS
        last_due = stop_at_ms + int(FROZEN_S * 1000) + 10_000
        jobs = [
            {"biz_type": b, "job_id": f"j{due}", "due_at": due}
            for due in range(first_due, last_due, SPACING_MS)
            for b in biz_types
        ]
        for i in range(0, len(jobs), 500):
            r = await api.post("/v1/jobs:batch", json={"jobs": jobs[i : i + 500]})
            assert r.status_code == 200, r.text
            assert all(x["status"] == 201 for x in r.json()["results"]), r.text
    frozen = chaos.service(frozen_name)
    assert frozen.proc is not None
    await asyncio.sleep(max(0, stop_at_ms - now_ms()) / 1000)
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    stopped_ms = now_ms()
    chaos.progress(f"SIGSTOP {frozen_name} for {FROZEN_S:g} s")
    try:
        await asyncio.sleep(FROZEN_S)
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
    resumed_ms = now_ms()
    chaos.progress(f"SIGCONT {frozen_name}")
    expected = {(j["biz_type"], j["job_id"]) for j in jobs}
    await wait_for(chaos, expected, 60)
    await asyncio.sleep(5)  # a stale send after the resume would land by now

    # Served by the other within 15 s: every job of the frozen broker's biz types due
    # during the freeze is received by 15 s after the SIGSTOP (or its due time).
    first_seen: dict[tuple[str, str], int] = {}
    for call in chaos.receiver.calls:
        key = (call.biz_type, call.job_id)
        first_seen[key] = min(first_seen.get(key, call.received_ms), call.received_ms)
    late, lateness = [], []
    for job in jobs:
        if job["biz_type"] not in theirs or job["due_at"] >= resumed_ms:
            continue
        key = (job["biz_type"], job["job_id"])
        lateness.append(first_seen[key] - job["due_at"])
        served_by_ms = max(job["due_at"], stopped_ms + TAKEOVER_MS) + SLACK_MS
        if first_seen[key] > served_by_ms:
            late.append((key, first_seen[key] - job["due_at"]))
    lateness.sort()
    chaos.progress(
        f"{len(lateness)} jobs of {frozen_name}'s biz types due while it was frozen: "
        f"lateness p50 {lateness[len(lateness) // 2]} ms, max {lateness[-1]} ms; the first "
        f"callback of them {takeover_ms(chaos, theirs, stopped_ms)} ms after the SIGSTOP"
    )
    assert not late, f"not served within {TAKEOVER_MS} ms (+ slack) of the SIGSTOP: {late[:5]}"

    # Nothing twice: each (job, attempt) received once; every attempt is the first.
    sent = Counter((c.biz_type, c.job_id, c.attempt) for c in chaos.receiver.calls)
    twice = {k: n for k, n in sent.items() if n > 1}
    assert not twice, f"called back more than once: {sorted(twice.items())[:10]}"
    retried = [c for c in chaos.receiver.calls if c.attempt != 1]
    assert not retried, f"no attempt failed, yet retries went out: {retried[:5]}"


async def wait_for(chaos: Chaos, expected: set[tuple[str, str]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        got = {(c.biz_type, c.job_id) for c in chaos.receiver.calls if c.accepted}
        missing = expected - got
        if not missing:
            return
        assert time.monotonic() < deadline, (
            f"{len(missing)} never called back: {sorted(missing)[:5]}"
        )
        await asyncio.sleep(0.25)


def takeover_ms(chaos: Chaos, theirs: list[str], stopped_ms: int) -> int | None:
    """When the first callback of the frozen broker's biz types after the SIGSTOP came."""
    after = [c.received_ms for c in chaos.receiver.calls if c.biz_type in theirs]
    after = [ms for ms in after if ms > stopped_ms + QUIET_AROUND_STOP_MS]
    return None if not after else min(after) - stopped_ms
