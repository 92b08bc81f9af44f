"""Faults at any command: what a plan may answer when the fake is about to run one.

A plan is any callable taking the `Command` and returning a fault, a sequence of
faults (applied in order) or None. The fake consults it before every command
(each `getMore`, commit and abort included), then:

- `Delay(s)`: waits `s` seconds on the fake's clock, then goes on;
- `Stall()`: waits until the test calls `release()` (`reached` says it got there);
- `Fail(error)`: raises `error` before anything is applied;
- `LoseReply(error)`: applies the command, then raises `error` as if the reply
  was lost on the way (the write is visible to everyone afterwards).

`FaultPlan` is a small rule list for tests; `SeededFaults` draws faults at
random from a seeded `random.Random`, for a simulation.
"""

from __future__ import annotations

import asyncio
import fnmatch
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo.errors import AutoReconnect, NetworkTimeout, NotPrimaryError, PyMongoError


@dataclass(frozen=True, slots=True)
class Command:
    """What a client asked of the server: the PyMongo method (or `getMore`,
    `commitTransaction`, `abortTransaction`), where, and its arguments."""

    seq: int
    database: str
    collection: str | None
    name: str
    args: dict[str, Any]
    in_transaction: bool = False

    def brief(self, width: int = 160) -> str:
        """One line for a trace: `#12 update_many timer.jobs_b5 {...}`."""
        where = self.database if self.collection is None else f"{self.database}.{self.collection}"
        txn = " (txn)" if self.in_transaction else ""
        line = f"#{self.seq} {self.name} {where}{txn} {self.args}"
        return line if len(line) <= width else line[: width - 1] + "…"


ErrorSource = BaseException | Callable[[], BaseException]


def _error(source: ErrorSource) -> BaseException:
    return source() if callable(source) and not isinstance(source, BaseException) else source


@dataclass(frozen=True, slots=True)
class Fail:
    error: ErrorSource = field(default_factory=lambda: connection_lost)

    def make(self) -> BaseException:
        return _error(self.error)


@dataclass(frozen=True, slots=True)
class LoseReply:
    error: ErrorSource = field(default_factory=lambda: network_timeout)

    def make(self) -> BaseException:
        return _error(self.error)


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float


class Stall:
    """Holds every command it is given until released."""

    def __init__(self) -> None:
        self._released = asyncio.Event()
        self.reached = asyncio.Event()
        self.held = 0

    def release(self) -> None:
        self._released.set()

    async def wait(self) -> None:
        self.held += 1
        self.reached.set()
        await self._released.wait()


Fault = Fail | LoseReply | Delay | Stall
Faults = Callable[[Command], Fault | Sequence[Fault] | None]


def connection_lost() -> PyMongoError:
    return AutoReconnect("fake MongoDB: connection closed")


def network_timeout() -> PyMongoError:
    return NetworkTimeout("fake MongoDB: timed out waiting for the reply")


def not_primary() -> PyMongoError:
    return NotPrimaryError("fake MongoDB: not primary", {"code": 10107, "ok": 0})


@dataclass
class Rule:
    fault: Fault | Sequence[Fault]
    name: str = "*"
    collection: str = "*"
    times: int | None = 1  # None: every matching command
    when: Callable[[Command], bool] | None = None
    hits: int = 0

    def wants(self, command: Command) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if not fnmatch.fnmatchcase(command.name, self.name):
            return False
        if not fnmatch.fnmatchcase(command.collection or "", self.collection):
            return False
        return self.when is None or self.when(command)


class FaultPlan:
    """Rules tried in order; the first that wants a command gives its fault(s)."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []

    def add(
        self,
        fault: Fault | Sequence[Fault],
        *,
        name: str = "*",
        collection: str = "*",
        times: int | None = 1,
        when: Callable[[Command], bool] | None = None,
    ) -> Rule:
        rule = Rule(fault, name, collection, times, when)
        self.rules.append(rule)
        return rule

    def __call__(self, command: Command) -> Fault | Sequence[Fault] | None:
        for rule in self.rules:
            if rule.wants(command):
                rule.hits += 1
                return rule.fault
        return None


@dataclass
class SeededFaults:
    """Each command of a matching name meets at most one fault, drawn from `rng`:
    an error before it applies (`fail`), its reply lost after (`lose`), or a delay of
    up to `max_delay_s` (`delay`); the rest go through. The errors are drawn from
    `errors`. Commits and aborts are commands like the others."""

    rng: random.Random
    fail: float = 0.0
    lose: float = 0.0
    delay: float = 0.0
    max_delay_s: float = 1.0
    names: str = "*"
    errors: Sequence[Callable[[], BaseException]] = (connection_lost, network_timeout, not_primary)
    drawn: int = 0

    def __call__(self, command: Command) -> Fault | None:
        if not fnmatch.fnmatchcase(command.name, self.names):
            return None
        roll = self.rng.random()
        if roll < self.fail:
            fault: Fault = Fail(self.rng.choice(self.errors))
        elif roll < self.fail + self.lose:
            fault = LoseReply(self.rng.choice(self.errors))
        elif roll < self.fail + self.lose + self.delay:
            fault = Delay(self.rng.uniform(0, self.max_delay_s))
        else:
            return None
        self.drawn += 1
        return fault
