"""The store's faults in a run: windows of seeded command faults, switched on and off
by the run's faults; elections, during which every command waits for the new primary;
and claims whose reply is lost now and then all through the faulty phase (a socket
timeout or an election after the claim applied: a multi-document update is not a
retryable write). Each drawn fault is written to the history; a lost claim with the
jobs it claimed, for the checker's lateness bound."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.sim.fakemongo.engine import Engine
from tests.sim.fakemongo.faults import (
    Command,
    Delay,
    Fault,
    LoseReply,
    SeededFaults,
    network_timeout,
)
from tests.sim.history import History, LostClaim

DISPATCHED = "dispatched"

REDISCOVER_S = 0.5


@dataclass
class StoreFaults:
    """The fake driver's fault plan: seeded faults while `on`, none otherwise; each
    drawn fault is a fault in the history (a command's connection died). While
    `claims_on`, a claim (`update_many` of a bucket that sets jobs dispatched) loses
    its reply with probability `lose_claim` (the only fault then, so the checker can
    hold its jobs to a bound); `engine` (the fake's) tells which jobs it claims."""

    seeded: SeededFaults
    history: History
    claims: random.Random = field(default_factory=random.Random)
    lose_claim: float = 0.0
    engine: Engine | None = None
    on: bool = False
    claims_on: bool = False
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
        if self.claims_on and self.engine is not None and is_claim(command):
            if self.claims.random() < self.lose_claim:
                self._lost_claim(command, self.engine)
                return LoseReply(network_timeout)
        if not self.on:
            return None
        fault = self.seeded(command)
        if fault is not None:
            self.history.fault("store", f"{command.name} {type(fault).__name__}")
        return fault

    def _lost_claim(self, command: Command, engine: Engine) -> None:
        """What the claim will claim: the fake applies a command right after its faults
        are drawn, with nothing awaited in between for a lost reply."""
        assert command.collection is not None
        coll = engine.collection(command.database, command.collection)
        docs = engine.select(coll, command.args["filter"])
        token = command.args["update"]["$set"]["claim"]
        jobs = [((d["biz_type"], d["job_id"]), d["next_attempt_at"]) for d in docs]
        self.history.fault("lost-claim", f"{token} ({len(jobs)} jobs)")
        self.history.lost_claims.append(LostClaim(self.history.clock.now_ms(), token, jobs))


def is_claim(command: Command) -> bool:
    if command.name != "update_many" or not (command.collection or "").startswith("jobs_b"):
        return False
    update = command.args.get("update")
    return isinstance(update, dict) and update.get("$set", {}).get("state") == DISPATCHED


def store_faults(seed: int, history: History, *, lose_claim: float = 0.0) -> StoreFaults:
    rng = random.Random(f"store-faults/{seed}")
    return StoreFaults(
        SeededFaults(rng, fail=0.05, lose=0.05, delay=0.1, max_delay_s=0.5),
        history,
        claims=random.Random(f"lost-claims/{seed}"),
        lose_claim=lose_claim,
        rediscover=random.Random(f"elections/{seed}"),
    )
