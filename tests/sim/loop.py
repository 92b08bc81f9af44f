"""One seeded event loop: every process of the simulated cluster runs on it.

Which ready callback runs next is chosen by a `random.Random` of the run's seed (the
loop shuffles its ready queue at every turn), so a seed picks one interleaving of
every task and the same seed picks it again. Time is a `FakeClock` that moves only
once the loop is quiet (`FakeClock.run_until`): a wait on the clock ends in the same
order for the same seed, whatever the machine's speed.

Each task belongs to the simulated process it was created in (a context variable,
inherited by the tasks a task creates), so that a process can be frozen (its
callbacks held back, while time moves on) and crashed (its tasks cancelled).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import secrets
import uuid
from collections import deque
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import fastapi.dependencies.utils
import fastapi.routing

T = TypeVar("T")

PROCESS: contextvars.ContextVar[str] = contextvars.ContextVar("sim_process", default="world")


class SeededLoop(asyncio.SelectorEventLoop):
    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng
        self.frozen: set[str] = set()  # processes whose callbacks wait
        self.dead: set[str] = set()  # crashed processes: their callbacks never run
        self._held: deque[asyncio.Handle] = deque()  # a frozen process's callbacks
        self._graveyard: deque[asyncio.Handle] = deque()  # a crashed one's, never run
        self.tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self.set_task_factory(self._make_task)  # type: ignore[arg-type]

    def _run_once(self) -> None:
        ready: deque[asyncio.Handle] = self._ready  # type: ignore[attr-defined]
        if self._held:
            ready.extend(self._held)
            self._held.clear()
        if self.frozen or self.dead:
            for _ in range(len(ready)):
                handle = ready.popleft()
                process = _process_of(handle)
                if process in self.frozen:
                    self._held.append(handle)
                elif process in self.dead:
                    self._graveyard.append(handle)
                else:
                    ready.append(handle)
        if len(ready) > 1:
            order = list(ready)
            self.rng.shuffle(order)
            ready.clear()
            ready.extend(order)
        super()._run_once()  # type: ignore[misc]

    def end_of_run(self) -> list[asyncio.Task[Any]]:
        """Every process's tasks, cancelled, their held wake-ups back in the ready queue:
        once the run is checked, what crashed ones left behind may finish, so that no
        task is left pending when the loop closes."""
        self.frozen.clear()
        self.dead.clear()
        self._ready.extend(self._graveyard)  # type: ignore[attr-defined]
        self._graveyard.clear()
        left = [t for name, tasks in self.tasks.items() if name != "world" for t in tasks]
        for task in left:
            task.cancel()
        return left

    def _make_task(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        owner = context.get(PROCESS, "world") if context is not None else PROCESS.get()
        owned = self.tasks.setdefault(owner, set())
        owned.add(task)
        task.add_done_callback(owned.discard)
        return task


def _process_of(handle: asyncio.Handle) -> str:
    context: contextvars.Context | None = getattr(handle, "_context", None)
    return context.get(PROCESS, "world") if context is not None else "world"


def in_process(name: str) -> contextvars.Context:
    """A context whose tasks belong to the simulated process `name`."""
    context = contextvars.copy_context()
    context.run(PROCESS.set, name)
    return context


async def _inline(func: Any, *args: Any, **kwargs: Any) -> Any:
    return func(*args, **kwargs)


@contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """What would otherwise differ between two runs of one seed: FastAPI runs sync
    dependencies on a worker thread (whose finish the loop cannot order); claim tokens
    and generated job ids come from `uuid.uuid4`, request and audit ids from
    `secrets.token_hex`, the retry backoff's jitter from the global `random`."""
    ids = random.Random(f"ids/{seed}")
    saved = (
        uuid.uuid4,
        secrets.token_hex,
        fastapi.routing.run_in_threadpool,
        fastapi.dependencies.utils.run_in_threadpool,
    )
    state = random.getstate()
    random.seed(f"global/{seed}")
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    secrets.token_hex = lambda nbytes=32: ids.randbytes(nbytes or 32).hex()
    fastapi.routing.run_in_threadpool = _inline  # type: ignore[assignment]
    fastapi.dependencies.utils.run_in_threadpool = _inline  # type: ignore[assignment]
    try:
        yield
    finally:
        random.setstate(state)
        (
            uuid.uuid4,
            secrets.token_hex,
            fastapi.routing.run_in_threadpool,
            fastapi.dependencies.utils.run_in_threadpool,
        ) = saved


def run(seed: int, main: Coroutine[Any, Any, T]) -> T:
    """`main` to its end on a loop of its own seeded by `seed`."""
    loop = SeededLoop(random.Random(seed))
    try:
        with deterministic(seed):
            return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
