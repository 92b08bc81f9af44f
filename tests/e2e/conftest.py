"""The two ways a user runs the service: three processes, or `dev` alone."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest

from tests.e2e.harness import Service
from tests.support import (
    AMQP_URL,
    SecantusServer,
    drop_topology_sync,
    free_port,
    unique_name,
)


@dataclass
class Stack:
    kind: str
    api_port: int
    env: dict[str, str]
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        """Start every process at once, as a deployment does (the first to reach the store
        creates its indexes); if one does not come up, stop them all."""
        try:
            with ThreadPoolExecutor(max_workers=len(self.services) or 1) as pool:
                list(pool.map(Service.start, self.services.values()))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        # All at once: each may use its whole shutdown grace, and nothing orders them.
        with ThreadPoolExecutor(max_workers=len(self.services) or 1) as pool:
            list(pool.map(Service.stop_quietly, self.services.values()))
        prefix = self.env.get("TIMER_QUEUE_PREFIX")
        shared_vhost = self.env.get("TIMER_AMQP_URL") == AMQP_URL  # an own vhost goes whole
        if prefix and shared_vhost:  # idle quorum queues cost RabbitMQ work for every later test
            drop_topology_sync(prefix)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{s.tail(30)}" for n, s in self.services.items())


# The job-count sample every second, for the metrics test; it reads every open job, so
# the fault suite's 5,000-job runs keep the default.
FAST_STATS = {"TIMER_STATS_INTERVAL_S": "1"}


def split_stack(secantus: SecantusServer, **extra_env: str) -> Stack:
    api_port = free_port()
    env = {
        "TIMER_MONGO_URL": secantus.url,
        "TIMER_MONGO_DB": unique_name("e2e"),
        "TIMER_AMQP_URL": AMQP_URL,
        "TIMER_QUEUE_PREFIX": unique_name("e2e"),
        "TIMER_LEASE_TTL_MS": "2000",
        "TIMER_SHUTDOWN_GRACE_S": "5",
        "TIMER_LOG_LEVEL": "INFO",
        **extra_env,
    }
    stack = Stack("split", api_port, env)
    stack.services["api"] = Service("api", {**env, "TIMER_HTTP_PORT": str(api_port)}, api_port)
    daemon_port, broker_port = free_port(), free_port()
    stack.services["daemon"] = Service(
        "daemon", {**env, "TIMER_METRICS_PORT": str(daemon_port)}, daemon_port
    )
    stack.services["broker"] = Service(
        "broker", {**env, "TIMER_METRICS_PORT": str(broker_port)}, broker_port
    )
    return stack


def dev_stack(data_dir: str, **extra_env: str) -> Stack:
    api_port = free_port()
    env = {
        "TIMER_DATA_DIR": data_dir,
        "TIMER_HTTP_PORT": str(api_port),
        "TIMER_SHUTDOWN_GRACE_S": "5",
        **extra_env,
    }
    for unset in ("TIMER_MONGO_URL", "TIMER_AMQP_URL"):
        env.pop(unset, None)
    stack = Stack("dev", api_port, env)
    stack.services["dev"] = Service("dev", env, api_port)
    return stack


@pytest.fixture(scope="module", params=["split", "dev"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    data_dir = tempfile.mkdtemp(prefix="timer-dev-")
    if request.param == "split":
        built = split_stack(request.getfixturevalue("secantus"), **FAST_STATS)
    else:
        built = dev_stack(data_dir, **FAST_STATS)
    built.start()
    try:
        yield built
    finally:
        built.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
async def api(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as client:
        yield client
