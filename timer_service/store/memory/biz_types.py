"""In-memory biz types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from timer_service.errors import Conflict, VersionMismatch
from timer_service.model import ACTIVE_STATES, BizType
from timer_service.store.memory.state import MemoryState


class MemoryBizTypes:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def put_biz_type(
        self, biz: BizType, *, only_if_updated_at: int | None = None, create_only: bool = False
    ) -> bool:
        old = self._s.biz.get(biz.biz_type)
        if create_only and old is not None:
            raise VersionMismatch(f"biz type {biz.biz_type!r} exists")
        if only_if_updated_at is not None and (old is None or old.updated_at != only_if_updated_at):
            raise VersionMismatch(f"biz type {biz.biz_type!r} is not at the version named")
        if old is not None:
            biz = replace(biz, created_at=old.created_at)
        self._s.biz[biz.biz_type] = biz
        return old is None

    async def get_biz_type(self, name: str) -> BizType | None:
        return self._s.biz.get(name)

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]:
        return {n: self._s.biz[n] for n in set(names) if n in self._s.biz}

    async def list_biz_types(self) -> list[BizType]:
        return [self._s.biz[k] for k in sorted(self._s.biz)]

    async def keep_biz_types(self, names: Sequence[str]) -> set[str]:
        # A delete here is one step (no await): none is ever in progress to call off.
        return {n for n in names if n in self._s.biz}

    async def delete_biz_type(self, name: str) -> bool:
        if name not in self._s.biz:
            return False
        jobs = self._s.jobs.values()
        if any(j.biz_type == name and j.state in ACTIVE_STATES for j in jobs):
            raise Conflict(f"biz type {name!r} still has pending or dispatched jobs")
        del self._s.biz[name]
        self._s.rate_states.pop(name, None)  # as the biz type's document takes it along
        return True
