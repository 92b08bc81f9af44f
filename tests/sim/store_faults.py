"""Windows of store command faults: the fake driver's fault plan, seeded, switched on
and off by the run's faults, each drawn fault written to the history; and elections,
during which every command waits for the new primary."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.sim.fakemongo.faults import Command, Delay, Fault, SeededFaults
from tests.sim.history import History

REDISCOVER_S = 0.5


@dataclass
class StoreFaults:
    """The fake driver's fault plan: seeded faults while `on`, none otherwise; each
    drawn fault is a fault in the history (a command's connection died)."""

    seeded: SeededFaults
    history: History
    on: bool = False
    # Each command's wait past an election's end: clients find the new primary each at
    # its own moment (a write stuck on the old one may land after a later one).
    rediscover: random.Random = field(default_factory=lambda: random.Random(0))
    elected_at_ms: int = 0  # until then, every command waits (an election)

    def elect(self, seconds: float) -> None:
        """No primary for `seconds`: every command asked meanwhile waits until then, and
        up to REDISCOVER_S more, and goes through (nothing fails, no connection dies:
        outcome writes, marks and heartbeats are only slow)."""
        self.elected_at_ms = self.history.clock.now_ms() + round(seconds * 1000)
        self.history.fault("election", f"store {seconds:.1f} s")

    def __call__(self, command: Command) -> Fault | None:
        wait_ms = self.elected_at_ms - self.history.clock.now_ms()
        if wait_ms > 0:
            return Delay(wait_ms / 1000 + self.rediscover.uniform(0, REDISCOVER_S))
        if not self.on:
            return None
        fault = self.seeded(command)
        if fault is not None:
            self.history.fault("store", f"{command.name} {type(fault).__name__}")
        return fault


def store_faults(seed: int, history: History) -> StoreFaults:
    rng = random.Random(f"store-faults/{seed}")
    seeded = SeededFaults(rng, fail=0.05, lose=0.05, delay=0.1, max_delay_s=0.5)
    return StoreFaults(seeded, history, rediscover=random.Random(f"elections/{seed}"))
