"""The biz types port (`store.biz_types`), on both adapters: registration, rotation
and quota state, conditional puts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.stores import NOW, create, new
from timer_service.errors import Conflict, VersionMismatch
from timer_service.model import BizType
from timer_service.store.base import Store


async def test_biz_type_put_get_list_delete(store: Store) -> None:
    biz = BizType("orders", "http://127.0.0.1:1/cb", created_at=1, updated_at=1)
    assert await store.biz_types.put_biz_type(biz) is True
    assert (
        await store.biz_types.put_biz_type(
            BizType("orders", "http://x/", created_at=9, updated_at=9)
        )
        is False
    )
    got = await store.biz_types.get_biz_type("orders")
    assert got is not None and got.callback_url == "http://x/" and got.created_at == 1
    assert [b.biz_type for b in await store.biz_types.list_biz_types()] == ["orders"]
    assert set(await store.biz_types.get_biz_types(["orders", "nope"])) == {"orders"}
    await create(store, new("a"))
    with pytest.raises(Conflict):
        await store.biz_types.delete_biz_type("orders")
    await store.jobs.cancel_job("orders", "a", NOW)
    assert await store.biz_types.delete_biz_type("orders") is True
    assert await store.biz_types.delete_biz_type("orders") is False


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


async def test_a_conditional_put_replaces_only_the_version_it_names(store: Store) -> None:
    """If-Match made atomic: of two writers that read the same version, one wins and the
    other is refused, whatever came between their reads and their writes."""
    first = BizType("orders", "http://a/", created_at=1, updated_at=1)
    assert await store.biz_types.put_biz_type(first, only_if_updated_at=None) is True
    one = BizType("orders", "http://one/", created_at=2, updated_at=2)
    two = BizType("orders", "http://two/", created_at=3, updated_at=3)
    assert await store.biz_types.put_biz_type(one, only_if_updated_at=1) is False
    with pytest.raises(VersionMismatch):
        await store.biz_types.put_biz_type(two, only_if_updated_at=1)
    got = await store.biz_types.get_biz_type("orders")
    assert got is not None and got.callback_url == "http://one/", got
    with pytest.raises(VersionMismatch):  # no such biz type: no version to replace
        await store.biz_types.put_biz_type(replace(one, biz_type="other"), only_if_updated_at=2)
    assert await store.biz_types.get_biz_type("other") is None


async def test_a_create_only_put_never_replaces(store: Store) -> None:
    """If-None-Match: * made atomic: of two creators, one creates, the other is refused."""
    first = BizType("orders", "http://a/", created_at=1, updated_at=1)
    assert await store.biz_types.put_biz_type(first, create_only=True) is True
    with pytest.raises(VersionMismatch):
        await store.biz_types.put_biz_type(
            replace(first, callback_url="http://b/"), create_only=True
        )
    got = await store.biz_types.get_biz_type("orders")
    assert got == first, got


async def test_a_conditional_put_never_brings_back_a_deleted_biz_type(store: Store) -> None:
    """A PATCH that read a biz type which is deleted before it writes must not re-create it."""
    read = BizType("orders", "http://a/", created_at=1, updated_at=1)
    await store.biz_types.put_biz_type(read)
    assert await store.biz_types.delete_biz_type("orders") is True

    with pytest.raises(VersionMismatch):
        await store.biz_types.put_biz_type(replace(read, updated_at=2), only_if_updated_at=1)

    assert await store.biz_types.get_biz_type("orders") is None
