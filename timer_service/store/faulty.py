"""A store that fails on purpose: test tooling for "every caller survives a store call
that fails", shipped beside the recording wrapper (docs/architecture.md, "Guarantees").

`FaultyStore(store)` wraps any store. Each async port method can be told to fail
either *before* it applies (the call never reached the store) or *after* it
applied (the write happened, the reply was lost). Both raise `StoreUnavailable`,
which is all a caller sees of a broken connection, so a caller cannot tell them
apart and must retry idempotently or leave the repair to a sweep.

    faulty = FaultyStore(MemoryStore())
    faulty.fail("create_jobs", when="after")        # the next create applies, then fails
    faulty.fail_randomly(0.2, random.Random(7))      # each call fails with p = 0.2
    faulty.stall("claim_due")                        # the next claim waits, unapplied,
    faulty.resume()                                  # ... until now
    faulty.heal()                                    # no more faults (stalls resume)
    faulty.injected                                  # what was injected, in order

A stall is a call in flight while the world moves on (a paused process, a slow
network): what lets a test land a deposed daemon's write after a takeover.
Planned faults (`fail`) come before random ones. Method names are unique across
the ports, so a fault is named by its method alone. Non-async methods (the change
stream `watch_seconds`) and the store's lifecycle (`setup`, `close`, `ping`) pass
through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import random
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal

from timer_service.errors import StoreUnavailable
from timer_service.store.base import PORTS, Store

When = Literal["before", "after"]
RandomWhen = Literal["before", "after", "both"]
Fault = Literal["before", "after", "stall"]


def _async_methods(protocol: type) -> list[str]:
    return [
        name
        for name, member in vars(protocol).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    ]


# Every method a fault can be planned for, with the port it belongs to.
FAULTABLE: dict[str, str] = {
    method: port for port, protocol in PORTS.items() for method in _async_methods(protocol)
}


@dataclass(frozen=True, slots=True)
class Injected:
    """One injected fault: which call failed, and whether it had applied (or was
    stalled)."""

    method: str
    when: Fault


@dataclass(slots=True)
class _Plan:
    when: When
    left: int | None  # None: every call until healed


@dataclass(slots=True)
class _Random:
    rate: float
    rng: random.Random
    when: RandomWhen


class FaultyStore:
    """Wraps a store; every async port call first asks `_fault_for` whether to fail."""

    def __init__(self, store: Store) -> None:
        self.inner = store
        self.buckets = store.buckets
        self.injected: list[Injected] = []
        self._plans: dict[str, deque[_Plan]] = {}
        self._random: dict[str, _Random] = {}
        self._stalls: dict[str, int] = {}
        self._resumed = asyncio.Event()
        self.stalled = 0  # calls waiting for `resume` now
        # Every port of `PORTS`, so a new port can fail without a change here.
        for name in PORTS:
            setattr(self, name, _FaultyPort(getattr(store, name), self))

    # -- planning ---------------------------------------------------------------------
    def fail(self, method: str, when: When = "before", times: int | None = 1) -> None:
        """The next `times` calls of `method` fail `when` (None: all, until `heal`)."""
        _check_method(method)
        if when not in ("before", "after"):
            raise ValueError(f"when must be 'before' or 'after', not {when!r}")
        if times is not None and times < 1:
            raise ValueError(f"times must be at least 1 (or None for always), not {times}")
        self._plans.setdefault(method, deque()).append(_Plan(when, times))

    def fail_randomly(
        self,
        rate: float,
        rng: random.Random,
        methods: Collection[str] | None = None,
        when: RandomWhen = "both",
    ) -> None:
        """From now on each call of `methods` (default: all) fails with probability
        `rate`, before or after applying (`both`: either, by a coin of `rng`). A later
        call replaces this for the methods it names; the others keep theirs (an rng
        per method makes one method's faults independent of how often others are
        called: what a shrinking test case needs)."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be within [0, 1], not {rate}")
        if when not in ("before", "after", "both"):
            raise ValueError(f"when must be 'before', 'after' or 'both', not {when!r}")
        chosen = list(FAULTABLE if methods is None else methods)
        for method in chosen:
            _check_method(method)
        chance = _Random(rate, rng, when)
        for method in chosen:
            self._random[method] = chance

    def stall(self, method: str, times: int = 1) -> None:
        """The next `times` calls of `method` wait, not yet applied, until `resume`."""
        _check_method(method)
        self._stalls[method] = self._stalls.get(method, 0) + times

    def resume(self) -> None:
        """Stalled calls go on (and apply); stalls no call has reached are dropped."""
        self._stalls.clear()
        self._resumed.set()
        self._resumed = asyncio.Event()

    def heal(self) -> None:
        """No more faults, planned or random, and stalled calls go on; the log of
        injected ones stays."""
        self._plans.clear()
        self._random.clear()
        self.resume()

    @property
    def armed(self) -> bool:
        """Some fault is still planned, or random faults are on."""
        return bool(self._random or self._stalls) or any(self._plans.values())

    def injected_count(self, method: str | None = None, when: Fault | None = None) -> int:
        return sum(
            1
            for fault in self.injected
            if (method is None or fault.method == method) and (when is None or fault.when == when)
        )

    # -- deciding ----------------------------------------------------------------------
    def _fault_for(self, method: str) -> When | None:
        plans = self._plans.get(method)
        if plans:
            plan = plans[0]
            if plan.left is not None:
                plan.left -= 1
                if plan.left == 0:
                    plans.popleft()
            return plan.when
        chance = self._random.get(method)
        if chance is None:
            return None
        if chance.rng.random() >= chance.rate:
            return None
        if chance.when == "both":
            return "before" if chance.rng.random() < 0.5 else "after"
        return chance.when

    async def _call(self, method: str, call: Callable[[], Awaitable[Any]]) -> Any:
        if self._stalls.get(method):
            self._stalls[method] -= 1
            self.injected.append(Injected(method, "stall"))
            resumed = self._resumed
            self.stalled += 1
            try:
                await resumed.wait()
            finally:
                self.stalled -= 1
        when = self._fault_for(method)
        if when == "before":
            self.injected.append(Injected(method, "before"))
            raise StoreUnavailable(f"injected fault: {method} failed before applying")
        if when is None:
            return await call()
        # The reply is lost whatever it was: a result or the call's own error.
        with contextlib.suppress(Exception):
            await call()
        self.injected.append(Injected(method, "after"))
        raise StoreUnavailable(f"injected fault: {method} applied, then its reply was lost")

    # -- the rest is the wrapped store's --------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def setup(self) -> None:
        await self.inner.setup()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self.inner.ping()


class _FaultyPort:
    def __init__(self, port: Any, store: FaultyStore) -> None:
        self._port = port
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if name not in FAULTABLE:  # by the port's declaration: a wrapped port may hide it
            return attr
        store = self._store

        @functools.wraps(attr)  # keeps its signature for whoever wraps this in turn
        async def faulty(*args: Any, **kwargs: Any) -> Any:
            return await store._call(name, lambda: attr(*args, **kwargs))

        return faulty


def _check_method(method: str) -> None:
    if method not in FAULTABLE:
        known = ", ".join(sorted(FAULTABLE))
        raise ValueError(f"no store port has an async method {method!r}; known: {known}")


def faulty(store: Store) -> FaultyStore:
    return FaultyStore(store)


__all__: list[str] = [
    "FAULTABLE",
    "Fault",
    "FaultyStore",
    "Injected",
    "RandomWhen",
    "When",
    "faulty",
]
