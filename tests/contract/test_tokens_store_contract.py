"""The tokens port keeps a token's grant and hash, never more, on both adapters."""

from __future__ import annotations

from timer_service.access import AccessToken, Role, hash_token
from timer_service.store.base import Store


def token(token_id: str, created_at: int, role: Role = Role.PRODUCER) -> AccessToken:
    return AccessToken(
        id=token_id,
        name=f"team-{token_id}",
        role=role,
        biz_types=("orders", "refund-*"),
        created_at=created_at,
        token_hash=hash_token(f"tmr_{token_id}"),
    )


async def test_tokens_are_listed_oldest_first_as_created(store: Store) -> None:
    second, first = token("b", 2), token("a", 1, Role.ADMIN)
    await store.tokens.create_token(second)
    await store.tokens.create_token(first)
    listed = await store.tokens.list_tokens()
    assert listed == [first, second], f"expected [a, b], got {listed}"


async def test_a_deleted_token_is_gone_and_a_second_delete_finds_none(store: Store) -> None:
    kept, dropped = token("a", 1), token("b", 2)
    await store.tokens.create_token(kept)
    await store.tokens.create_token(dropped)
    assert await store.tokens.delete_token("b") is True
    assert await store.tokens.delete_token("b") is False
    assert await store.tokens.delete_token("never") is False
    listed = await store.tokens.list_tokens()
    assert listed == [kept], f"expected only a, got {listed}"


async def test_an_empty_store_has_no_tokens(store: Store) -> None:
    assert await store.tokens.list_tokens() == []
