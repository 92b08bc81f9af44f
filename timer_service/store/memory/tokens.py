"""The in-memory access tokens, by id in creation order."""

from __future__ import annotations

from timer_service.access import AccessToken


class MemoryTokens:
    def __init__(self) -> None:
        self._tokens: dict[str, AccessToken] = {}

    async def create_token(self, token: AccessToken) -> None:
        self._tokens[token.id] = token

    async def list_tokens(self) -> list[AccessToken]:
        return sorted(self._tokens.values(), key=lambda t: (t.created_at, t.id))

    async def delete_token(self, token_id: str) -> bool:
        return self._tokens.pop(token_id, None) is not None
