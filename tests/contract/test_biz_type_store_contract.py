"""Biz-type fields beyond the config (the signing-secret rotation) survive both adapters."""

from __future__ import annotations

from tests.contract.stores import NOW
from timer_service.model import BizType
from timer_service.store.base import Store


async def test_biz_type_keeps_its_rotation_state(store: Store) -> None:
    rotating = BizType(
        "orders", "http://x/", signing_secret="new", previous_signing_secret="old",
        previous_secret_expires_at=NOW + 60_000, created_at=1, updated_at=1,
    )  # fmt: skip
    await store.biz_types.put_biz_type(rotating)
    got = await store.biz_types.get_biz_type("orders")
    assert got == rotating, f"expected {rotating}, got {got}"
    assert await store.biz_types.list_biz_types() == [rotating]

    done = BizType("orders", "http://x/", signing_secret="new", created_at=9, updated_at=2)
    await store.biz_types.put_biz_type(done)

    got = await store.biz_types.get_biz_type("orders")
    expected = BizType("orders", "http://x/", signing_secret="new", created_at=1, updated_at=2)
    assert got == expected, f"expected {expected}, got {got}"


async def test_biz_type_keeps_its_registration_quota(store: Store) -> None:
    limited = BizType(
        "orders", "http://x/", registration_rate_per_s=12.5, registration_burst=40,
        created_at=1, updated_at=1,
    )  # fmt: skip
    await store.biz_types.put_biz_type(limited)
    got = await store.biz_types.get_biz_type("orders")
    assert got == limited, f"expected {limited}, got {got}"
    assert await store.biz_types.get_biz_types(["orders"]) == {"orders": limited}

    unlimited = BizType("orders", "http://x/", created_at=1, updated_at=2)
    await store.biz_types.put_biz_type(unlimited)
    got = await store.biz_types.get_biz_type("orders")
    assert got == unlimited, f"expected the quota lifted (None, None), got {got}"
