"""Biz types: written by the API, read by the API, the daemon and the broker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.model import BizType


class BizTypesPort(Protocol):
    async def put_biz_type(self, biz: BizType) -> bool:
        """Create or replace; True when created. Keeps created_at of a replaced one."""
        ...

    async def get_biz_type(self, name: str) -> BizType | None: ...

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]: ...

    async def list_biz_types(self) -> list[BizType]: ...

    async def delete_biz_type(self, name: str) -> bool:
        """False when unknown. Raises Conflict while it has pending or dispatched jobs."""
        ...
