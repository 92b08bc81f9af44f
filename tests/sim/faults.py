"""The run's faults, drawn from the seed: crashes and restarts, graceful stops,
freezes, lost queue connections, host wall-clock steps, rolling restarts of the
brokers, windows of store command faults (errors before a command applies, replies
lost after it applied, delays) and store elections (every command waits a few
seconds), one of them as a restarted broker takes its biz types back: the other
broker lets go of them while its outcome writes hang (issue 30, break 4).

Every fault ends before the run's quiet phase, so that the checker can ask for every
job to have settled by then.
"""

from __future__ import annotations

import random

from broker.app import Broker
from tests.sim.cluster import Cluster
from tests.sim.store_faults import StoreFaults
from timer_service.queue.amqp import HEARTBEAT_S

RESTART_AFTER_S = (0.5, 6.0)
FREEZE_S = (0.5, 8.0)
# One freeze in STALL_SHARE is a stall: longer than a broker's heartbeat TTL (6 s) and
# the daemon's judgement of it dead (2 s more), so that its biz types and its marked
# jobs go to the other broker while it is frozen (issue 30, break 9).
STALL_S = (9.0, 40.0)
STALL_SHARE = 0.3
# RabbitMQ closes a connection that sent no heartbeat for about two heartbeat
# intervals (timer_service/queue/amqp.py asks for HEARTBEAT_S): a frozen process's
# consumers lose their channels then, as a lost connection does.
AMQP_DEAD_AFTER_S = 2.0 * HEARTBEAT_S
RECONNECT_S = 1.0
QUEUE_LOST_S = (0.2, 3.0)
STORE_FAULT_WINDOW_S = (0.5, 4.0)
CLOCK_STEP_MS = (-3000, 3000)
# With REDISCOVER_S, shorter than a heartbeat's lapse (8 s from the last beat landed,
# at most 2 s before).
ELECTION_S = (3.5, 5.3)
LET_GO_WITHIN_S = 6.0  # a restarted broker's handover begins by then, if it has one
ROLLING_DOWN_S = (0.2, 1.5)  # a broker's restart in a rolling restart ...
ROLLING_NEXT_S = (0.5, 3.0)  # ... and the wait before the next one's


class Faults:
    def __init__(
        self,
        cluster: Cluster,
        seed: int,
        *,
        duration_ms: int,
        every_s: float,
        store: StoreFaults | None,
        clock_steps: bool,
        rolling_restarts: bool = False,
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(f"faults/{seed}")
        self.duration_ms = duration_ms
        self.every_s = every_s
        self.store = store
        self.kinds = (
            ("crash", "stop", "freeze", "queue", "store", "election")
            + (("clock",) if clock_steps else ())
            + (("rolling",) if rolling_restarts else ())
        )

    async def run(self) -> None:
        cluster, clock, rng = self.cluster, self.cluster.clock, self.rng
        end_ms = clock.now_ms() + self.duration_ms
        while True:
            await clock.sleep(rng.expovariate(1 / self.every_s))
            if clock.now_ms() >= end_ms:
                return
            slot = rng.choice([s for s in cluster.slots if not s.startswith("api")])
            kind = rng.choice(self.kinds)
            if slot not in cluster.processes:
                continue  # down already: its restart is on its way
            if kind == "crash":
                cluster.crash(slot)
                await clock.sleep(rng.uniform(*RESTART_AFTER_S))
                await cluster.start(slot)
            elif kind == "stop":
                await cluster.stop(slot)
                await clock.sleep(rng.uniform(*RESTART_AFTER_S))
                await cluster.start(slot)
            elif kind == "freeze":
                stall = rng.random() < STALL_SHARE
                frozen_s = rng.uniform(*(STALL_S if stall else FREEZE_S))
                cluster.freeze(slot)
                if frozen_s > AMQP_DEAD_AFTER_S:
                    await clock.sleep(AMQP_DEAD_AFTER_S)
                    cluster.lose_queue(slot)
                    await clock.sleep(frozen_s - AMQP_DEAD_AFTER_S)
                    cluster.thaw(slot)
                    await clock.sleep(RECONNECT_S)  # connect_robust reconnects after resume
                    cluster.restore_queue(slot)
                else:
                    await clock.sleep(frozen_s)
                    cluster.thaw(slot)
            elif kind == "queue":
                cluster.lose_queue(slot)
                await clock.sleep(rng.uniform(*QUEUE_LOST_S))
                cluster.restore_queue(slot)
            elif kind == "store" and self.store is not None:
                self.store.on = True
                await clock.sleep(rng.uniform(*STORE_FAULT_WINDOW_S))
                self.store.on = False
            elif kind == "election" and self.store is not None:
                if slot.startswith("broker"):  # a rolling restart's handover under it
                    await cluster.stop(slot)
                    await clock.sleep(rng.uniform(*RESTART_AFTER_S))
                    await cluster.start(slot)
                    await self._until_a_let_go(LET_GO_WITHIN_S)
                seconds = rng.uniform(*ELECTION_S)
                self.store.elect(seconds)
                await clock.sleep(seconds)
            elif kind == "clock":
                cluster.step_clock(slot, rng.randint(*CLOCK_STEP_MS))
            elif kind == "rolling":
                await self._rolling_restart()

    async def _rolling_restart(self) -> None:
        """Every broker up, one after the other: stopped (SIGTERM), started again."""
        cluster, clock, rng = self.cluster, self.cluster.clock, self.rng
        for slot in [s for s in cluster.slots if s.startswith("broker")]:
            if slot not in cluster.processes:
                continue
            await cluster.stop(slot)
            await clock.sleep(rng.uniform(*ROLLING_DOWN_S))
            await cluster.start(slot)
            await clock.sleep(rng.uniform(*ROLLING_NEXT_S))

    async def _until_a_let_go(self, within_s: float) -> None:
        """Until a broker lets go of a biz type (or `within_s` passed)."""
        cluster, clock = self.cluster, self.cluster.clock
        end_ms = clock.now_ms() + within_s * 1000
        while clock.now_ms() < end_ms:
            for process in cluster.processes.values():
                if isinstance(process.component, Broker) and process.component.letting_go:
                    return
            await clock.sleep(0.05)
