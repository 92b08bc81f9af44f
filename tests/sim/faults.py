"""The run's faults, drawn from the seed: crashes and restarts, graceful stops,
freezes, lost queue connections, host wall-clock steps, rolling restarts of the
brokers and windows of store command faults (errors before a command applies,
replies lost after it applied, delays).

Every fault ends before the run's quiet phase, so that the checker can ask for every
job to have settled by then.
"""

from __future__ import annotations

import random

from tests.sim.cluster import Cluster
from tests.sim.store_faults import StoreFaults

RESTART_AFTER_S = (0.5, 6.0)
FREEZE_S = (0.5, 8.0)
QUEUE_LOST_S = (0.2, 3.0)
STORE_FAULT_WINDOW_S = (0.5, 4.0)
CLOCK_STEP_MS = (-3000, 3000)
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
            ("crash", "stop", "freeze", "queue", "store")
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
                cluster.freeze(slot)
                await clock.sleep(rng.uniform(*FREEZE_S))
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
