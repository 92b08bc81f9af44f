"""A store that counts every port call: for tests and benchmarks, instead of
counters inside the adapters."""

from __future__ import annotations

from collections import Counter
from typing import Any

from timer_service.store.base import PORTS, Store


class _CountingPort:
    def __init__(self, port: Any, ops: Counter[str]) -> None:
        self._port = port
        self._ops = ops

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        ops = self._ops

        def counted(*args: Any, **kwargs: Any) -> Any:
            ops[name] += 1
            return attr(*args, **kwargs)

        return counted


class RecordingStore:
    """Wraps a store; `ops` counts calls by method name (method names are unique
    across the ports). Everything else is the wrapped store's."""

    def __init__(self, store: Store) -> None:
        self.inner = store
        self.ops: Counter[str] = Counter()
        for name in PORTS:
            setattr(self, name, _CountingPort(getattr(store, name), self.ops))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def setup(self) -> None:
        self.ops["setup"] += 1
        await self.inner.setup()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        self.ops["ping"] += 1
        await self.inner.ping()


def recording(store: Store) -> RecordingStore:
    return RecordingStore(store)


__all__: list[str] = ["RecordingStore", "recording"]
