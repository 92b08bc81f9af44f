"""Biz types: written by the API, read by the API, the daemon and the broker.

A delete and a create of the biz type's jobs each write, then read what the other
writes: the delete marks the biz type, then looks for its jobs; a create writes its
jobs, then reads its biz types again (`keep_biz_types`). Whatever the interleaving,
one of them sees the other (docs/architecture.md, "Deleting a biz type")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.model import BizType


class BizTypesPort(Protocol):
    async def put_biz_type(
        self, biz: BizType, *, only_if_updated_at: int | None = None, create_only: bool = False
    ) -> bool:
        """Create or replace; True when created. Keeps created_at of a replaced one.

        `only_if_updated_at` replaces only the stored version with that `updated_at`
        (which every write changes), `create_only` only creates; either raises
        VersionMismatch, atomically, when the store holds something else."""
        ...

    async def get_biz_type(self, name: str) -> BizType | None: ...

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]: ...

    async def list_biz_types(self) -> list[BizType]: ...

    async def delete_biz_type(self, name: str) -> bool:
        """False when unknown. Raises Conflict while it has pending or dispatched jobs,
        or when a create of its jobs called the delete off meanwhile."""
        ...

    async def keep_biz_types(self, names: Sequence[str]) -> set[str]:
        """Those of `names` that exist, each with any delete in progress called off (it
        then raises Conflict): what a create asks after writing its jobs. A name not
        returned was deleted: the create withdraws its jobs of it."""
        ...
