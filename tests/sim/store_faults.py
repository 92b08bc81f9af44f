"""Windows of store command faults: the fake driver's fault plan, seeded, switched on
and off by the run's faults, each drawn fault written to the history."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.sim.fakemongo.faults import Command, Fault, SeededFaults
from tests.sim.history import History


@dataclass
class StoreFaults:
    """The fake driver's fault plan: seeded faults while `on`, none otherwise; each
    drawn fault is a fault in the history (a command's connection died)."""

    seeded: SeededFaults
    history: History
    on: bool = False

    def __call__(self, command: Command) -> Fault | None:
        if not self.on:
            return None
        fault = self.seeded(command)
        if fault is not None:
            self.history.fault("store", f"{command.name} {type(fault).__name__}")
        return fault


def store_faults(seed: int, history: History) -> StoreFaults:
    rng = random.Random(f"store-faults/{seed}")
    return StoreFaults(SeededFaults(rng, fail=0.05, lose=0.05, delay=0.1, max_delay_s=0.5), history)
