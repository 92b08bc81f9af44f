"""Broker processes share the biz types (broker/ownership.py): each consumes its own,
a newcomer takes its share make-before-break, a broker gone hands its share to the
rest; every job is called back once throughout."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from broker.ownership import owner
from tests.integration.broker_env import BrokerProcess, Env
from tests.unit.broker_harness import create, now_ms, wait_for_states
from timer_service.model import JobState

pytestmark = pytest.mark.integration

BIZ = [f"share{i}" for i in range(16)]


async def consuming(env: Env) -> dict[str, set[str]]:
    """What each live broker says it consumes."""
    now = now_ms()
    beats = await env.store.brokers.broker_beats()
    return {b.broker_id: set(b.consuming) for b in beats if b.expires_at > now}


async def until_spread(env: Env, brokers: int, timeout_s: float = 20) -> dict[str, set[str]]:
    """Wait until `brokers` live brokers consume exactly the biz types each owns."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        seen = await consuming(env)
        expected: dict[str, set[str]] = {b: set() for b in seen}
        for biz in BIZ:
            if seen:
                expected[owner(biz, seen)].add(biz)
        if len(seen) == brokers and seen == expected:
            return seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"expected {brokers} brokers sharing {BIZ}, got {seen}")


async def fire(env: Env, tag: str, per_biz: int = 3) -> list[tuple[str, str]]:
    due = now_ms() + 1500
    jobs = []
    for biz in BIZ:
        jobs += await create(env.store, biz, [f"{tag}{i}" for i in range(per_biz)], due)
    env.daemon.watch([due])
    await env.daemon.dispatch_once()
    await wait_for_states(env.store, jobs, {JobState.DELIVERED}, 30)
    return jobs


def assert_once(env: Env, jobs: list[tuple[str, str]]) -> None:
    counts = {
        (b, j): len([r for r in env.receiver.for_biz(b) if r.json["job_id"] == j]) for b, j in jobs
    }
    wrong = {k: n for k, n in counts.items() if n != 1}
    assert wrong == {}, f"expected one callback each, got {wrong}"


async def two_brokers_sharing(env: Env) -> tuple[BrokerProcess, list[tuple[str, str]]]:
    """Two broker processes sharing BIZ, a first round of jobs called back; the first
    broker and those jobs."""
    for biz in BIZ:
        await env.put_biz(biz)
    first, second = env.spawn_broker(), env.spawn_broker()
    await asyncio.gather(first.ready(), second.ready())
    await until_spread(env, 2)
    return first, await fire(env, "a")


async def test_two_brokers_share_the_biz_types_and_a_third_takes_its_part(env: Env) -> None:
    _, jobs = await two_brokers_sharing(env)
    third = env.spawn_broker()
    await third.ready()
    shares = await until_spread(env, 3)
    assert sum(len(s) > 0 for s in shares.values()) >= 2, f"not shared: {shares}"
    jobs += await fire(env, "b")
    await asyncio.sleep(0.5)  # a duplicate would arrive now
    assert_once(env, jobs)


@pytest.mark.parametrize("how", ["sigterm", "kill"])
async def test_a_broker_gone_hands_its_biz_types_to_the_other(env: Env, how: str) -> None:
    first, jobs = await two_brokers_sharing(env)
    gone_at = time.monotonic()
    first.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    await asyncio.to_thread(first.proc.wait, 15)
    # SIGTERM: it says goodbye and the other takes over at its next discovery; kill -9:
    # its heartbeat lapses first (HEARTBEAT_TTL_MS, 6 s).
    await until_spread(env, 1, timeout_s=15)
    taken_s = time.monotonic() - gone_at
    bound_s = 3 if how == "sigterm" else 9
    assert taken_s < bound_s, f"took over after {taken_s:.1f} s"
    jobs += await fire(env, "b")
    await asyncio.sleep(0.5)
    assert_once(env, jobs)
