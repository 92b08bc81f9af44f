"""The simulated cluster: API instances, daemons and brokers built by the same wiring as
the real processes (`timer_service.processes.build`), over one store (the real
`MongoStore` on the fake driver, or the `MemoryStore`), one RabbitMQ model and the
seeded endpoints, all on one `FakeClock`.

A process is an incarnation: its tasks belong to it (`loop.PROCESS`), its store
client, queue connection and memory are its own. A crash drops its tasks where they
stand (their callbacks are never run again, no `finally` runs) and closes its
channels; a restart builds a new incarnation from the build functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from broker.app import Broker
from daemon.app import Daemon
from tests.sim.endpoints import Endpoints
from tests.sim.fake_store import fake_mongo_store
from tests.sim.fakemongo import FakeMongo
from tests.sim.history import Call, History
from tests.sim.loop import SeededLoop, in_process
from tests.sim.rabbit import Rabbit, RabbitConnection
from tests.sim.store_faults import StoreFaults
from timer_service.calendar import counted, counts_biz
from timer_service.clock import FakeClock
from timer_service.constants import SECONDS_COLLECTION
from timer_service.metric_specs import API, BROKER, DAEMON
from timer_service.metrics import Metrics
from timer_service.partitions import slot as slot_of
from timer_service.processes.build import build_api, build_broker, build_daemon
from timer_service.processes.dependencies import Dependencies
from timer_service.settings import Settings
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore
from timer_service.store.mongo.layout import biz_of_field

Counted = tuple[int, str]  # (slot, biz type; "*" for all of them)
T = TypeVar("T")

BUCKETS = 60
RETENTION_MS = 86_400_000
START_RETRY_S = 0.5


def sim_settings() -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None,
        lease_ttl_ms=2000,
        reconcile_after_ms=10_000,
        shutdown_grace_s=2,
    )


class HostClock:
    """A host's wall clock: the true virtual clock plus an offset that a fault steps
    forward or back. Its monotonic clock and its waits are the true clock's: a step
    moves the wall clock only, as NTP stepping a host's clock does."""

    def __init__(self, true: FakeClock) -> None:
        self.true = true
        self.offset_ms = 0

    def now_ms(self) -> int:
        return self.true.now_ms() + self.offset_ms

    def monotonic_s(self) -> float:
        return self.true.monotonic_s()

    async def sleep(self, seconds: float) -> None:
        await self.true.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        return await self.true.wait_for(awaitable, timeout_s)


@dataclass
class Process:
    role: str  # api, daemon, broker
    slot: str  # "broker-1": what restarts as a new incarnation
    name: str  # "broker-1#2": this incarnation
    store: Store
    component: Any  # FastAPI app, Daemon or Broker
    conn: RabbitConnection | None
    clock: HostClock
    client: httpx.AsyncClient | None = None
    up: bool = False


class Cluster:
    def __init__(
        self,
        seed: int,
        loop: SeededLoop,
        clock: FakeClock,
        history: History,
        *,
        mongo: bool,
        apis: int = 2,
        daemons: int = 2,
        brokers: int = 2,
        store_faults: StoreFaults | None = None,
    ) -> None:
        self.seed = seed
        self.loop = loop
        self.clock = clock
        self.history = history
        self.settings = sim_settings()
        self.rng = random.Random(f"cluster/{seed}")
        self.store_faults = store_faults
        self.rabbit = Rabbit(history.note)
        # The workload's deleted biz types (workload.RACED): dead jobs to replay.
        self.endpoints = Endpoints(seed, clock, dying={"promo-": 0.3})
        history.callbacks = self.endpoints.callbacks
        self.mongo = FakeMongo(clock, store_faults, shuffle=random.Random(seed)) if mongo else None
        self.memory = None if mongo else MemoryStore(buckets=BUCKETS, retention_ms=RETENTION_MS)
        self._incarnations = itertools.count(1)
        self.host_offsets: dict[str, int] = {}
        self.processes: dict[str, Process] = {}  # by slot: the live incarnation
        self.slots = (
            [f"api-{i}" for i in range(1, apis + 1)]
            + [f"daemon-{i}" for i in range(1, daemons + 1)]
            + [f"broker-{i}" for i in range(1, brokers + 1)]
        )

    # -- building --------------------------------------------------------------------------
    def _store(self) -> Store:
        if self.mongo is not None:
            return fake_mongo_store("timer", self.mongo, buckets=BUCKETS, retention_ms=RETENTION_MS)
        assert self.memory is not None
        return self.memory

    def _build(self, slot: str) -> Process:
        role = slot.split("-")[0]
        name = f"{slot}#{next(self._incarnations)}"
        store = self._store()
        clock = HostClock(self.clock)
        clock.offset_ms = self.host_offsets.get(slot, 0)
        conn = None if role == "api" else self.rabbit.connection(name)
        metrics = Metrics(roles={"api": API, "daemon": DAEMON, "broker": BROKER}[role])
        http = self.endpoints.client(name)
        deps = Dependencies(clock, store, metrics, name, conn, http_client=http)
        component: Any
        if role == "api":
            component = build_api(self.settings, deps)
        elif role == "daemon":
            component = build_daemon(self.settings, deps)
        else:
            component = build_broker(self.settings, deps)
        return Process(role, slot, name, store, component, conn, clock)

    async def start(self, slot: str) -> None:
        """A new incarnation of `slot`, started in the background as a process starts:
        its store and queue retried until they answer."""
        process = self._build(slot)
        self.processes[slot] = process
        self.history.note(f"start {process.name}")
        self.loop.create_task(self._boot(process), context=in_process(process.name))

    async def _boot(self, process: Process) -> None:
        while True:
            try:
                await process.store.setup()
                if process.conn is not None:
                    await process.conn.connect()
                if process.role == "api":
                    transport = httpx.ASGITransport(process.component)
                    process.client = httpx.AsyncClient(transport=transport, base_url="http://api")
                else:
                    await process.component.start()
                process.up = True
                self.history.note(f"up {process.name}")
                return
            except (
                Exception
            ) as exc:  # a store or queue fault at start: retried, as the lifecycle does
                self.history.note(f"start of {process.name} failed: {type(exc).__name__}")
                await self.clock.sleep(START_RETRY_S)

    async def setup(self) -> None:
        """The schema, once, before any process: a process that finds it at start waits
        for nothing (the schema's wait for another's setup is on the real clock)."""
        await self._store().setup()

    async def start_all(self) -> None:
        for slot in self.slots:
            await self.start(slot)

    # -- faults ---------------------------------------------------------------------------
    def crash(self, slot: str) -> None:
        process = self.processes.pop(slot)
        self.history.fault("crash", process.name)
        self.loop.dead.add(process.name)
        if process.conn is not None:
            process.conn.drop()

    async def stop(self, slot: str) -> None:
        """A graceful stop (SIGTERM): the component hands back its work."""
        process = self.processes.pop(slot)
        self.history.fault("stop", process.name)
        task = self.loop.create_task(self._stop(process), context=in_process(process.name))
        await asyncio.wait((task,))

    async def _stop(self, process: Process) -> None:
        if process.up and isinstance(process.component, Daemon | Broker):
            await process.component.stop()
        if process.conn is not None:
            await process.conn.close()

    def freeze(self, slot: str) -> None:
        process = self.processes[slot]
        self.history.fault("freeze", process.name)
        self.loop.frozen.add(process.name)

    def thaw(self, slot: str) -> None:
        process = self.processes.get(slot)
        if process is not None and process.name in self.loop.frozen:
            self.history.fault("thaw", process.name)
            self.loop.frozen.discard(process.name)

    def lose_queue(self, slot: str) -> None:
        process = self.processes[slot]
        if process.conn is not None and process.conn.connected:
            self.history.fault("queue-lost", process.name)
            process.conn.lose()

    def restore_queue(self, slot: str) -> None:
        process = self.processes.get(slot)
        if process is not None and process.conn is not None and not process.conn.connected:
            self.history.fault("queue-back", process.name)
            process.conn.restore()

    def step_clock(self, slot: str, ms: int) -> None:
        """Step the host's wall clock of `slot` by `ms` (a restart keeps the host)."""
        process = self.processes[slot]
        self.history.fault(f"clock {ms:+d} ms", process.name)
        self.host_offsets[slot] = process.clock.offset_ms = process.clock.offset_ms + ms

    async def heal(self) -> None:
        """The faults are over: every frozen process resumes, every lost connection
        comes back, every slot down starts again; the store answers every command."""
        if self.store_faults is not None:
            self.store_faults.on = self.store_faults.claims_on = False
        for slot in self.slots:
            self.thaw(slot)
            self.restore_queue(slot)
            if slot not in self.processes:
                await self.start(slot)

    async def shutdown(self) -> None:
        """After the checks: every process stopped, and what crashed ones left behind
        cancelled and run to its end (a pending task collected after the loop closed
        has crashed CPython 3.11 at exit)."""
        self.history.note("shutdown")
        for slot in reversed(self.slots):
            if slot in self.processes:
                process = self.processes.pop(slot)
                stopping = self.loop.create_task(
                    self._stop(process), context=in_process(process.name)
                )
                await asyncio.wait((stopping,))
        left = self.loop.end_of_run()
        if left:
            with contextlib.suppress(TimeoutError):
                await self.clock.drive(asyncio.wait(left), within_ms=60_000)

    def job_documents(self) -> list[dict[str, Any]]:
        """Every job document in the fake's database, whichever collection holds it."""
        assert self.mongo is not None
        return [
            doc
            for coll in self.mongo.engine.dbs.get("timer", {}).values()
            for doc in coll.docs.values()
            if {"biz_type", "job_id", "state"} <= doc.keys()
        ]

    def calendar_counts(self) -> tuple[dict[Counted, int], dict[Counted, int]]:
        """The load calendar's counts by (slot, biz type), and the pending business jobs
        by the same, from the store's own data at the end of the run (the counts are
        meant to equal the jobs: `Checker.counts_equal_jobs`)."""
        counts: dict[Counted, int] = {}
        jobs: Counter[Counted] = Counter()
        if self.mongo is not None:
            tables = self.mongo.engine.dbs.get("timer", {})
            entries = (
                tables[SECONDS_COLLECTION].docs.values() if SECONDS_COLLECTION in tables else ()
            )
            for entry in entries:
                for name, n in (entry.get("by") or {}).items():
                    counts[(int(entry["_id"]), biz_of_field(name))] = n
                counts[(int(entry["_id"]), "*")] = entry.get("n", 0)
            for doc in self.job_documents():
                if doc["state"] == "pending" and counts_biz(doc["biz_type"]):
                    jobs[(slot_of(doc.get("partition", 0), doc["second"]), doc["biz_type"])] += 1
        else:
            assert self.memory is not None
            state = self.memory.state
            for biz, by_slot in state.due_by_biz.items():
                counts.update({(at, biz): n for at, n in by_slot.items()})
            counts.update({(at, "*"): n for at, n in state.due.items()})
            for job in state.jobs.values():
                if (where := counted(job)) is not None:
                    jobs[(state.slot(job.key, where[0]), where[1])] += 1
        for (at, _), n in list(jobs.items()):
            jobs[(at, "*")] += n
        return counts, dict(jobs)

    # -- the API, as a client sees it --------------------------------------------------------
    async def call(self, method: str, path: str, body: Any = None) -> Call:
        """One request to a live API instance (chosen by the seed), recorded whole."""
        apis = [p for p in self.processes.values() if p.role == "api" and p.client is not None]
        call = Call(method, path, body, self.clock.now_ms())
        self.history.calls.append(call)
        if not apis:
            call.ended_ms, call.status, call.answer = call.started_ms, 0, "no API up"
            return call
        api = self.rng.choice(apis)
        assert api.client is not None
        answer = await api.client.request(method, path, json=body)
        call.ended_ms, call.status = self.clock.now_ms(), answer.status_code
        call.answer = answer.json() if answer.content else None
        return call

    async def drive(self, step: Awaitable[Any], within_ms: int = 600_000) -> Any:
        return await self.clock.drive(step, within_ms)

    async def run_for(self, ms: int) -> None:
        await self.clock.run_for(ms)
