"""The run's faults, drawn from the seed: crashes and restarts, graceful stops,
freezes, lost queue connections, host wall-clock steps and windows of store command
faults (errors before a command applies, replies lost after it applied, delays).

Every fault ends before the run's quiet phase, so that the checker can ask for every
job to have settled by then.
"""

from __future__ import annotations

import random

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
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(f"faults/{seed}")
        self.duration_ms = duration_ms
        self.every_s = every_s
        self.store = store
        self.kinds = ("crash", "stop", "freeze", "queue", "store") + (
            ("clock",) if clock_steps else ()
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
            elif kind == "clock":
                cluster.step_clock(slot, rng.randint(*CLOCK_STEP_MS))
