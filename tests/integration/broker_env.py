"""The world of the broker integration tests: the store, RabbitMQ, a receiver, the
daemon stand-in, and broker processes spawned with the real entry point. The `env`
fixture is in this directory's conftest."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aio_pika

from tests.support import AMQP_URL, VENV_BIN, SecantusServer, free_port
from tests.unit.broker_harness import DaemonStandIn, Receiver
from timer_service.model import BizType
from timer_service.queue.amqp import AmqpQueue, exchange_name, queue_name


class Env:
    """One test's world: store, queue, receiver, the daemon stand-in, its biz types."""

    def __init__(
        self,
        store: Any,
        queue: AmqpQueue,
        receiver: Receiver,
        prefix: str,
        mongo_url: str,
        mongo_db: str,
    ) -> None:
        self.store = store
        self.queue = queue
        self.receiver = receiver
        self.prefix = prefix
        self.mongo_url = mongo_url
        self.mongo_db = mongo_db
        self.daemon = DaemonStandIn(store, queue)
        self.biz_types: list[str] = []
        self.processes: list[BrokerProcess] = []

    async def put_biz(self, name: str, **config: Any) -> BizType:
        biz = BizType(name, self.receiver.url(name), **config)
        await self.store.biz_types.put_biz_type(biz)
        await self.queue.ensure_biz(name)
        if name not in self.biz_types:
            self.biz_types.append(name)
        return biz

    def spawn_broker(self, grace_s: float = 5) -> BrokerProcess:
        proc = BrokerProcess(self, grace_s)
        self.processes.append(proc)
        return proc


class BrokerProcess:
    def __init__(self, env: Env, grace_s: float) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="broker-", suffix=".log", delete=False)
        environ = {
            **os.environ,
            "TIMER_MONGO_URL": env.mongo_url,
            "TIMER_MONGO_DB": env.mongo_db,
            "TIMER_AMQP_URL": AMQP_URL,
            "TIMER_QUEUE_PREFIX": env.prefix,
            "TIMER_METRICS_PORT": str(self.port),
            "TIMER_SHUTDOWN_GRACE_S": str(grace_s),
            "TIMER_LOG_LEVEL": "INFO",
        }
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "timer-service"), "broker"],
            env=environ,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 20) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"broker exited: {self.output()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"broker not ready in {timeout_s}s: {self.output()}")

    async def ready(self) -> None:
        await asyncio.to_thread(self.wait_ready)
        await asyncio.sleep(0.3)  # its first discovery pass starts the consumers

    def output(self) -> str:
        with open(self.log.name) as f:
            return f.read()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        os.unlink(self.log.name)


async def make_env(
    mongo_store: Any, queue_prefix: str, secantus: SecantusServer, mongo_db: str
) -> AsyncIterator[Env]:
    queue = AmqpQueue(AMQP_URL, queue_prefix)
    await queue.connect()
    receiver = Receiver()
    await receiver.start()
    e = Env(mongo_store, queue, receiver, queue_prefix, secantus.url, mongo_db)
    try:
        yield e
    finally:
        await e.daemon.stop()
        for proc in e.processes:
            proc.stop()
        await receiver.stop()
        await queue.close()
        await delete_topology(queue_prefix, e.biz_types)


async def delete_topology(prefix: str, biz_types: list[str]) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        for name in [queue_name(prefix, b) for b in biz_types]:
            channel = await connection.channel()
            try:
                await channel.queue_delete(name)
            except Exception:
                pass
        channel = await connection.channel()
        try:
            await channel.exchange_delete(exchange_name(prefix))
        except Exception:
            pass
