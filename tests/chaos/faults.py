"""The faults of a chaos run, each recorded with its window (for attributing duplicates).

Every fault acts on what the run owns: its processes, its proxies, its store server and
the connections of its own vhost. None touches the machine's RabbitMQ as a whole.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from tests.chaos.conftest import Chaos
from tests.e2e.harness import Service, now_ms
from tests.support import rabbitmqctl

DEATH_S = 2.0  # how long a killed process stays down
AMQP_OUTAGE_S = 4.0
STORE_OUTAGE_S = 2.0
STORE_STALL_S = 3.0


@dataclass(frozen=True)
class Step:
    fraction: float  # of a cycle of the schedule
    name: str
    act: Callable[[Chaos], Awaitable[str]]  # returns what it did, for the progress line


async def kill_and_restart(chaos: Chaos, name: str) -> str:
    service = chaos.service(name)
    started = now_ms()
    await asyncio.to_thread(service.kill)
    await asyncio.sleep(DEATH_S)
    await asyncio.to_thread(service.start)
    chaos.record(f"kill -9 {name}", started)
    return f"kill -9 {name}, back {(now_ms() - started) / 1000:.1f} s later"


def _leads(daemon: Service) -> bool:
    try:
        text = daemon.metrics()
    except httpx.HTTPError:
        return False
    return re.search(r"^timer_daemon_leader 1(\.0)?$", text, re.M) is not None


async def kill_leader_daemon(chaos: Chaos) -> str:
    for name in ("daemon-a", "daemon-b"):
        if await asyncio.to_thread(_leads, chaos.service(name)):
            return await kill_and_restart(chaos, name)
    return await kill_and_restart(chaos, "daemon-a")  # none leads right now: kill one anyway


async def close_broker_connections(chaos: Chaos, name: str) -> str:
    """`rabbitmqctl close_connection` on the broker's connections, found by the peer ports
    its proxy uses towards RabbitMQ."""
    ports = chaos.amqp_proxies[name].upstream_ports()
    vhost = chaos.amqp_url.rsplit("/", 1)[1]
    listing = await asyncio.to_thread(rabbitmqctl, "list_connections", "pid", "peer_port", "vhost")
    started = now_ms()  # the listing takes seconds on a busy node; the fault starts now
    closed = 0
    for line in listing.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[2] == vhost and fields[1].isdigit():
            if int(fields[1]) in ports:
                await asyncio.to_thread(rabbitmqctl, "close_connection", fields[0], "chaos run")
                closed += 1
    chaos.record(f"close_connection {name}", started)
    return f"rabbitmqctl close_connection on {closed} connection(s) of {name}"


async def amqp_outage(chaos: Chaos) -> str:
    """RabbitMQ unreachable for everyone: every connection reset, new ones refused."""
    started = now_ms()
    for proxy in chaos.amqp_proxies.values():
        proxy.set_mode("refuse")
        proxy.reset_all()
    await asyncio.sleep(AMQP_OUTAGE_S)
    for proxy in chaos.amqp_proxies.values():
        proxy.set_mode("pass")
    chaos.record("RabbitMQ outage", started)
    return f"RabbitMQ unreachable for {AMQP_OUTAGE_S:g} s (connections reset, new ones refused)"


async def store_outage(chaos: Chaos) -> str:
    started = now_ms()
    chaos.store_proxy.set_mode("refuse")
    chaos.store_proxy.reset_all()
    await asyncio.sleep(STORE_OUTAGE_S)
    chaos.store_proxy.set_mode("pass")
    chaos.record("store outage", started)
    return f"store unreachable for {STORE_OUTAGE_S:g} s (connections reset, new ones refused)"


async def store_stall(chaos: Chaos) -> str:
    started = now_ms()
    chaos.store_proxy.set_mode("stall")
    await asyncio.sleep(STORE_STALL_S)
    chaos.store_proxy.set_mode("pass")
    chaos.record("store stall", started)
    return f"store silent for {STORE_STALL_S:g} s (bytes held both ways)"


async def store_lost_replies(chaos: Chaos) -> str:
    """Three writes reach the store and their replies are lost (the client retries)."""
    started = now_ms()
    chaos.store_proxy.drop_next_reply(3)
    await asyncio.sleep(1)
    chaos.record("store replies lost", started)
    return "the next 3 store replies lost, their connections reset"


SCHEDULE = (
    Step(0.06, "store connections reset", store_outage),
    Step(0.14, "close broker-a", lambda c: close_broker_connections(c, "broker-a")),
    Step(0.24, "kill broker-b", lambda c: kill_and_restart(c, "broker-b")),
    Step(0.36, "RabbitMQ outage", amqp_outage),
    Step(0.48, "kill leader daemon", kill_leader_daemon),
    Step(0.58, "store stall", store_stall),
    Step(0.68, "close broker-b", lambda c: close_broker_connections(c, "broker-b")),
    Step(0.78, "kill broker-a", lambda c: kill_and_restart(c, "broker-a")),
    Step(0.90, "store replies lost", store_lost_replies),
)
