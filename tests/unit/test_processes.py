"""The one wiring: every component is built from settings and injected dependencies
(what the simulation builds its cluster with), each process exports only its own
role's metrics, and the service commands' flags win over the environment."""

from __future__ import annotations

import argparse
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.callback import CallbackRequest, Response
from broker.sender import Sender
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import Clock, FakeClock
from timer_service.metric_specs import API, BROKER, DAEMON, ROLES, SPECS, Role
from timer_service.metrics import Metrics, render
from timer_service.processes.args import settings_for
from timer_service.processes.build import build_api, build_broker, build_daemon
from timer_service.processes.dependencies import Dependencies
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore

DAEMON_ONLY = {"timer_scan_lag_seconds", "timer_daemon_leader", "timer_daemon_partitions_owned"}
BROKER_ONLY = {"timer_callbacks", "timer_rate_limited", "timer_delivery_lateness_seconds"}


def settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


def deps(roles: frozenset[Role], instance_id: str, clock: Clock | None = None) -> Dependencies:
    return Dependencies(
        clock=clock or FakeClock(),
        store=MemoryStore(buckets=60, retention_ms=86_400_000),
        metrics=Metrics(roles=roles),
        instance_id=instance_id,
        queue=MemoryQueue(),
    )


def families(metrics: Metrics) -> set[str]:
    return {f.name for f in text_string_to_metric_families(render(metrics.registry).decode())}


async def test_a_daemon_and_a_broker_are_built_from_what_is_injected() -> None:
    clock = FakeClock()
    made: list[Clock] = []

    def http_client(at: Clock, policy: TargetPolicy) -> Sender:
        made.append(at)
        return Sender(at, policy)

    daemon = build_daemon(settings(), deps(DAEMON, "daemon-a", clock))
    broker_deps = deps(BROKER, "broker-a", clock)
    broker = build_broker(
        settings(), Dependencies(**{**vars(broker_deps), "http_client": http_client})
    )
    assert daemon.holder_id == "daemon-a" and daemon.clock is clock
    assert broker.broker_id == "broker-a"
    assert made == [clock, clock]  # the businesses' callbacks, and the service's own


def test_a_daemon_without_a_queue_is_refused_with_what_to_pass() -> None:
    no_queue = Dependencies(FakeClock(), MemoryStore(), Metrics(roles=DAEMON), "d")
    with pytest.raises(ValueError, match="needs a queue"):
        build_daemon(settings(), no_queue)


async def test_the_api_serves_its_own_metrics_and_no_daemon_or_broker_gauge() -> None:
    api_deps = deps(API, "api-a")
    await api_deps.store.setup()
    app = build_api(settings(), api_deps)
    api_deps.metrics.scan_lag(3.0)  # code shared between roles may call any method
    api_deps.metrics.callback_outcome("orders", "delivered", 0.01)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://127.0.0.1"
    ) as client:
        assert (await client.get("/healthz")).status_code == 200
        text = (await client.get("/metrics")).text
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"timer_jobs_created", "timer_http_requests"} <= names, sorted(names)
    assert not names & (DAEMON_ONLY | BROKER_ONLY), sorted(names & (DAEMON_ONLY | BROKER_ONLY))


def test_the_daemon_exports_none_of_the_brokers_metrics_and_the_broker_none_of_its() -> None:
    daemon, broker = families(Metrics(roles=DAEMON)), families(Metrics(roles=BROKER))
    assert DAEMON_ONLY <= daemon and not daemon & BROKER_ONLY, sorted(daemon)
    assert BROKER_ONLY <= broker and not broker & DAEMON_ONLY, sorted(broker)
    assert "timer_jobs_created" not in daemon | broker
    assert "timer_store_errors" in daemon & broker


def test_dev_exports_every_declared_metric() -> None:
    assert {spec.name for spec in SPECS} <= families(Metrics(roles=ROLES))
    assert families(Metrics()) == families(Metrics(roles=ROLES))


def test_every_metric_belongs_to_some_role_and_is_declared_once() -> None:
    names = [spec.name for spec in SPECS]
    assert len(names) == len(set(names))
    assert all(spec.roles and spec.roles <= ROLES for spec in SPECS)


def test_flags_win_over_the_environment_which_wins_over_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIMER_HTTP_HOST", raising=False)
    monkeypatch.setenv("TIMER_HTTP_PORT", "9090")
    monkeypatch.setenv("TIMER_DATA_DIR", "/from/env")
    no_flags = argparse.Namespace(host=None, port=None, data_dir=None)
    from_env = settings_for("dev", no_flags)
    assert (from_env.http_host, from_env.http_port, from_env.data_dir) == (
        "127.0.0.1",
        9090,
        "/from/env",
    )
    flags = argparse.Namespace(host="0.0.0.0", port=7070, data_dir="/from/flag")
    from_flags = settings_for("dev", flags)
    assert (from_flags.http_host, from_flags.http_port, from_flags.data_dir) == (
        "0.0.0.0",
        7070,
        "/from/flag",
    )
    assert from_flags.allowed_hosts == "*"  # defaulted for the address the flag gave
    assert settings_for("daemon", argparse.Namespace()).http_port == 9090


class Endpoint(Sender):
    """A business endpoint in the process: answers 200 to every callback, on the clock
    it is given, with no socket."""

    def __init__(self, clock: Clock, policy: TargetPolicy) -> None:
        super().__init__(clock, policy)
        self.received: list[tuple[int, dict[str, object]]] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        self.received.append((self._clock.now_ms(), json.loads(request.body)))
        return Response(200)

    @property
    def is_open(self) -> bool:
        return True


async def test_a_cluster_built_by_the_wiring_fires_a_job_on_virtual_time() -> None:
    """What the simulation does: an API, a daemon and a broker from the build functions
    over one FakeClock, store and queue; 30 s of virtual time pass in well under one
    real second, so nothing in them waits on the real clock."""
    clock = FakeClock()
    store, queue = MemoryStore(buckets=60, retention_ms=86_400_000), MemoryQueue()
    await store.setup()
    await queue.connect()
    endpoints: list[Endpoint] = []

    def endpoint(at: Clock, policy: TargetPolicy) -> Sender:
        endpoints.append(Endpoint(at, policy))
        return endpoints[-1]

    def deps(roles: frozenset[Role], name: str) -> Dependencies:
        return Dependencies(clock, store, Metrics(roles=roles), name, queue, http_client=endpoint)

    app = build_api(settings(), deps(API, "api-1"))
    daemon = build_daemon(settings(), deps(DAEMON, "daemon-1"))
    broker = build_broker(settings(), deps(BROKER, "broker-1"))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://127.0.0.1"
    ) as client:
        biz = {"callback_url": "http://orders.example/cb"}
        assert (await client.put("/v1/biz-types/orders", json=biz)).status_code == 201
        job = {"biz_type": "orders", "job_id": "o-1", "delay_ms": 20_000}
        created = await client.post("/v1/jobs", json=job)
        assert created.status_code == 201, created.text
    due_ms = created.json()["due_at"]
    started_s = time.monotonic()
    await daemon.start()
    await broker.start()
    received = endpoints[0].received  # the businesses' sender (endpoints[1]: the canary's)
    assert await clock.run_until(lambda: bool(received), within_ms=30_000), "no callback"
    await clock.drive(broker.stop(), within_ms=30_000)
    await clock.drive(daemon.stop(), within_ms=30_000)
    took_s = time.monotonic() - started_s
    sent_ms, body = received[0]
    assert body["job_id"] == "o-1" and due_ms <= sent_ms < due_ms + 1000, (sent_ms - due_ms, body)
    assert took_s < 5, f"{took_s:.1f} s of real time for 20 s of virtual time"
