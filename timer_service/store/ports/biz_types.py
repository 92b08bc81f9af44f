"""Biz types: written by the API, read by the API, the daemon and the broker."""

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
        """False when unknown. Raises Conflict while it has pending or dispatched jobs."""
        ...
