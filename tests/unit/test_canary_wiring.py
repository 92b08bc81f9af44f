"""The canary the whole way on virtual time, as the simulation builds a cluster: an API
with its canary task, a daemon and a broker from the build functions over one FakeClock,
store and queue; the broker's callbacks reach the API app in the process, no socket."""

from __future__ import annotations

import httpx

from broker.callback import CallbackRequest, Response
from broker.sender import Sender
from timer_service.callback_targets import TargetPolicy, parse_cidrs
from timer_service.clock import Clock, FakeClock
from timer_service.metric_specs import API, BROKER, DAEMON, Role
from timer_service.metrics import Metrics
from timer_service.processes.build import build_api, build_broker, build_canary, build_daemon
from timer_service.processes.dependencies import Dependencies
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore

INTERVAL_MS = 1000


class InProcess(Sender):
    """Posts callbacks to the API app through ASGI, under the policy it was made with."""

    def __init__(self, clock: Clock, policy: TargetPolicy, api: httpx.AsyncClient) -> None:
        super().__init__(clock, policy)
        self.policy = policy
        self.api = api
        self.sent: list[str] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        if self.policy.deny_networks:  # what the real sender would refuse: 127.0.0.1
            return Response(None, error="refused by the callback target policy", refused=True)
        self.sent.append(url)
        answer = await self.api.post(url, content=request.body, headers=request.headers)
        return Response(answer.status_code)

    @property
    def is_open(self) -> bool:
        return True


async def test_canary_callbacks_go_the_whole_way_past_a_denying_policy() -> None:
    # Deny-CIDRs covering the API's own address, as k8s/README.md suggests for a cluster
    # with no receivers in it: the businesses' sender refuses, the canary's does not.
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, canary_interval_ms=INTERVAL_MS, callback_deny_cidrs="127.0.0.0/8"
    )
    # FastAPI runs the handlers' sync dependencies on a thread: while one runs the loop
    # looks quiet, so each move of time is capped, as for real I/O (FakeClock).
    clock = FakeClock(max_step_ms=10)
    store, queue = MemoryStore(buckets=60, retention_ms=86_400_000), MemoryQueue()
    await store.setup()
    await queue.connect()
    api_metrics = Metrics(roles=API)
    senders: list[InProcess] = []

    def sender(at: Clock, policy: TargetPolicy) -> Sender:
        senders.append(InProcess(at, policy, client))
        return senders[-1]

    def deps(roles: frozenset[Role], name: str, metrics: Metrics | None = None) -> Dependencies:
        metrics = metrics or Metrics(roles=roles)
        return Dependencies(clock, store, metrics, name, queue, http_client=sender)

    app = build_api(settings, deps(API, "api-1", api_metrics))
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        canary = build_canary(settings, deps(API, "api-1", api_metrics))
        assert canary is not None
        daemon = build_daemon(settings, deps(DAEMON, "daemon-1"))
        broker = build_broker(settings, deps(BROKER, "broker-1"))
        assert [s.policy.deny_networks for s in senders] == [parse_cidrs("127.0.0.0/8"), ()]
        for part in (canary, daemon, broker):
            await part.start()
        started_s = clock.now_ms() / 1000

        def arrivals() -> float:
            count = api_metrics.registry.get_sample_value("timer_canary_lateness_seconds_count")
            return count or 0.0

        def lateness_sum() -> float:
            total = api_metrics.registry.get_sample_value("timer_canary_lateness_seconds_sum")
            return total or 0.0

        # The first may wait for the daemon's first lease; the steady state is measured.
        assert await clock.run_until(lambda: arrivals() >= 1, within_ms=30_000), arrivals()
        first_count, first_sum = arrivals(), lateness_sum()
        assert await clock.run_until(lambda: arrivals() >= 5, within_ms=30_000), arrivals()
        for part in (broker, daemon, canary):
            await clock.drive(part.stop(), within_ms=30_000)

    registry = api_metrics.registry
    last = registry.get_sample_value("timer_canary_last_success_timestamp_seconds")
    assert last is not None and last > started_s + 4, (last, started_s)
    mean_s = (lateness_sum() - first_sum) / (arrivals() - first_count)
    assert 0 <= mean_s < 0.1, f"canary lateness {mean_s:.3f} s on virtual time"
    businesses, own = senders
    assert businesses.sent == [] and set(own.sent) == {"http://127.0.0.1:8080/canary"}
