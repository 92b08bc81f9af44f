"""Access tokens: the API creates, lists and deletes them, and reads them all to check
requests (from a cache it refreshes; docs/api.md, "Access control")."""

from __future__ import annotations

from typing import Protocol

from timer_service.access import AccessToken


class TokensPort(Protocol):
    async def create_token(self, token: AccessToken) -> None:
        """Keep the token (its id and hash are new and unique)."""
        ...

    async def list_tokens(self) -> list[AccessToken]:
        """Every token, oldest first."""
        ...

    async def delete_token(self, token_id: str) -> bool:
        """Remove the token; False if there was none with this id."""
        ...
