"""Who may do what: roles, the biz types a token covers, and access tokens
(docs/api.md, "Access control").

A token's secret is shown once; the store keeps its SHA-256. A plain, unsalted hash is
enough here because the secret is 32 random bytes (`secrets.token_urlsafe`): nobody can
guess or brute-force a preimage of 256 bits, so the salt and work factor that protect
human passwords buy nothing, and a fast hash lets every request be checked by a
dictionary lookup.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from timer_service.constants import BIZ_TYPE_PATTERN

TOKEN_PREFIX = "tmr_"  # so that secret scanners find a leaked token
# 1 to 64 characters, no control character, no space at either end.
TOKEN_NAME_PATTERN = r"^\S(?:[^\x00-\x1f\x7f]{0,62}\S)?$"
MAX_SCOPE_ENTRIES = 100
# A biz type, or a prefix of one ending in `*` ("*" alone: every biz type).
SCOPE_ENTRY_RE = re.compile(rf"(?:{BIZ_TYPE_PATTERN[1:-1]})|(?:[a-z0-9][a-z0-9_.-]{{0,62}})?\*")


class Role(StrEnum):
    """Ordered: each role may do everything the roles before it may."""

    VIEWER = "viewer"
    PRODUCER = "producer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def includes(self, other: Role) -> bool:
        return self.rank >= other.rank


T = TypeVar("T")
_RANKS = {role: i for i, role in enumerate(Role)}


def scope_errors(entries: Sequence[str]) -> list[tuple[int, str]]:
    """(index, message) for each entry that is neither a biz type nor a prefix ending `*`."""
    return [
        (i, "must be a biz type or a prefix ending in '*'")
        for i, entry in enumerate(entries)
        if not SCOPE_ENTRY_RE.fullmatch(entry)
    ]


@dataclass(frozen=True, slots=True)
class Grant:
    """What the caller of one request may do. `biz_types` empty: every biz type (only an
    admin token may be created without biz types)."""

    name: str
    role: Role
    biz_types: tuple[str, ...] = ()

    @property
    def unrestricted(self) -> bool:
        return not self.biz_types

    @property
    def only_biz_type(self) -> str | None:
        """The one biz type this grant covers, when it names exactly one."""
        if len(self.biz_types) == 1 and not self.biz_types[0].endswith("*"):
            return self.biz_types[0]
        return None

    def allows(self, role: Role) -> bool:
        return self.role.includes(role)

    def covers(self, biz_type: str) -> bool:
        if self.unrestricted:
            return True
        for entry in self.biz_types:
            if entry.endswith("*"):
                if biz_type.startswith(entry[:-1]):
                    return True
            elif biz_type == entry:
                return True
        return False

    def visible(self, items: Iterable[T], biz_type_of: Callable[[T], str]) -> list[T]:
        """The items whose biz type (`biz_type_of(item)`) this grant covers."""
        return [item for item in items if self.covers(biz_type_of(item))]

    def to_public(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role.value, "biz_types": list(self.biz_types)}


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    return "tok_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class AccessToken:
    """A stored token: its grant and the hash of its secret, never the secret."""

    id: str
    name: str
    role: Role
    biz_types: tuple[str, ...]
    created_at: int
    token_hash: str

    @property
    def grant(self) -> Grant:
        return Grant(self.name, self.role, self.biz_types)

    def to_public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role.value,
            "biz_types": list(self.biz_types),
            "created_at": self.created_at,
        }

    def to_doc(self) -> dict[str, Any]:
        return {**self.to_public(), "token_hash": self.token_hash}

    @classmethod
    def from_doc(cls, d: dict[str, Any]) -> AccessToken:
        return cls(
            id=d["id"],
            name=d["name"],
            role=Role(d["role"]),
            biz_types=tuple(d["biz_types"]),
            created_at=int(d["created_at"]),
            token_hash=d["token_hash"],
        )
