"""The chaos deployment: api + 2 daemons + 2 brokers, each reaching RabbitMQ through a fault
proxy of its own and the store through a shared one, on a store and a vhost of the run's own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

import pytest

from tests.chaos.receiver import ChaosReceiver
from tests.chaos.verdict import Fault
from tests.e2e.conftest import Stack, split_stack
from tests.e2e.harness import Service, now_ms
from tests.faultproxy import FaultProxy
from tests.support import Progress, SecantusServer, free_port, own_vhost, secantus_server

# A job left in flight by a killed broker is sent again after this (the default, 60 s,
# would make every run a minute longer without proving more).
RECONCILE_AFTER_MS = 10_000


@dataclass
class Chaos:
    stack: Stack
    store: SecantusServer
    store_proxy: FaultProxy
    amqp_url: str
    amqp_proxies: dict[str, FaultProxy]  # by service name
    receiver: ChaosReceiver
    progress: Progress
    faults: list[Fault] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return self.stack.api_url

    def service(self, name: str) -> Service:
        return self.stack.services[name]

    def record(self, name: str, start_ms: int) -> None:
        self.faults.append(Fault(name, start_ms, now_ms()))


def _add(stack: Stack, name: str, command: str) -> None:
    port = free_port()
    stack.services[name] = Service(
        command, {**stack.env, "TIMER_METRICS_PORT": str(port)}, port, name=name
    )


@pytest.fixture
def chaos_receiver() -> ChaosReceiver:
    return ChaosReceiver()


@pytest.fixture
def chaos_parts() -> Iterator[tuple[SecantusServer, str, FaultProxy]]:
    with secantus_server() as store, own_vhost("chaos") as amqp_url:
        with FaultProxy.from_url(store.url) as store_proxy:
            yield store, amqp_url, store_proxy


@pytest.fixture
async def chaos(
    chaos_parts: tuple[SecantusServer, str, FaultProxy],
    chaos_receiver: ChaosReceiver,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Chaos]:
    store, amqp_url, store_proxy = chaos_parts
    stack = split_stack(
        store,
        TIMER_MONGO_URL=store_proxy.url_for(store.url),
        TIMER_AMQP_URL=amqp_url,
        TIMER_RECONCILE_AFTER_MS=str(RECONCILE_AFTER_MS),
    )
    for role in ("daemon", "broker"):
        stack.services[f"{role}-a"] = stack.services.pop(role)
        stack.services[f"{role}-a"].name = f"{role}-a"
    _add(stack, "daemon-b", "daemon")
    _add(stack, "broker-b", "broker")
    progress = Progress(request.node.name, request.config)
    with ExitStack() as proxies:
        amqp_proxies = {}
        for name, service in stack.services.items():
            proxy = proxies.enter_context(FaultProxy.from_url(amqp_url))
            service.env["TIMER_AMQP_URL"] = proxy.url_for(amqp_url)
            amqp_proxies[name] = proxy
        await chaos_receiver.start()
        progress("starting api, 2 daemons, 2 brokers, a store and a RabbitMQ vhost of its own")
        try:
            await asyncio.to_thread(stack.start)
            try:
                yield Chaos(
                    stack, store, store_proxy, amqp_url, amqp_proxies, chaos_receiver, progress
                )
            except BaseException:
                print(stack.logs())
                raise
            finally:
                await asyncio.to_thread(stack.stop)
        finally:
            await chaos_receiver.stop()
            progress("stopped")
