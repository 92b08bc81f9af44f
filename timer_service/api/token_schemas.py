"""Request and response models of `/v1/tokens` (docs/api.md, "Access control")."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from timer_service.access import MAX_SCOPE_ENTRIES, TOKEN_NAME_PATTERN, Role, scope_errors
from timer_service.api.schemas import _Strict

RoleName = Literal["viewer", "producer", "operator", "admin"]


class TokenIn(_Strict):
    name: str = Field(
        pattern=TOKEN_NAME_PATTERN,
        description="Who holds it (the audit log's actor); need not be unique, so a"
        " rotation can create the new token under the old one's name.",
    )
    role: RoleName = Field(description="viewer < producer < operator < admin.")
    biz_types: list[str] = Field(
        default_factory=list,
        max_length=MAX_SCOPE_ENTRIES,
        description="Biz types, or prefixes ending in `*` (`refund-*`; `*` alone is every"
        " biz type). Required (non-empty) for every role but admin; an admin without"
        " biz types covers all of them.",
    )

    @model_validator(mode="after")
    def _scoped(self) -> TokenIn:
        for i, msg in scope_errors(self.biz_types):
            raise ValueError(f"biz_types[{i}] {self.biz_types[i]!r} {msg}")
        if not self.biz_types and Role(self.role) is not Role.ADMIN:
            raise ValueError(f"biz_types is required (non-empty) for role {self.role!r}")
        return self


class TokenOut(BaseModel):
    id: str
    name: str
    role: RoleName
    biz_types: list[str]
    created_at: int = Field(description="Epoch ms.")


class NewTokenOut(TokenOut):
    token: str = Field(description="The secret (`tmr_…`), shown in this answer only.")


class TokenListOut(BaseModel):
    items: list[TokenOut]


class WhoAmIOut(BaseModel):
    name: str = Field(description='The token\'s name ("anonymous" when the API is open).')
    role: RoleName
    biz_types: list[str] = Field(description="Empty: every biz type.")
    auth: bool = Field(description="Whether the API asks for a token at all.")
