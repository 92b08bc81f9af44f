"""BSON values as the server sees them: normalised copies, type order, comparison,
equality and dotted paths.

Every document, filter and update enters the fake through `normalised` (a BSON
round trip: tuples become lists, enums their values, datetimes UTC milliseconds;
what BSON cannot hold fails as PyMongo fails) and leaves through `as_reply` (the
client's codec options), so a caller never shares a dict with the store.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator
from typing import Any

import bson
from bson import ObjectId
from bson.codec_options import CodecOptions
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.regex import Regex
from bson.timestamp import Timestamp

Doc = dict[str, Any]

INTERNAL: CodecOptions[Any] = CodecOptions(tz_aware=True)


class _Missing:
    """A path that names nothing: sorts and equals as null, but does not exist."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def normalised(value: Any) -> Any:
    """`value` as it would arrive at the server (a deep copy)."""
    return bson.decode(bson.encode({"v": value}), INTERNAL)["v"]


def as_reply(doc: Doc, options: CodecOptions[Any]) -> Doc:
    """A stored document as the client decodes it (a deep copy)."""
    return bson.decode(bson.encode(doc), options)  # type: ignore[return-value]


def now_date(now_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)


# -- type order ----------------------------------------------------------------------------
# https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/


def type_rank(value: Any) -> int:
    if isinstance(value, MinKey):
        return 0
    if value is None or value is MISSING:
        return 1
    if isinstance(value, bool):  # before int: True is not 1 in BSON
        return 8
    if isinstance(value, int | float | Int64 | Decimal128):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, dict):
        return 4
    if isinstance(value, list):
        return 5
    if isinstance(value, bytes):
        return 6
    if isinstance(value, ObjectId):
        return 7
    if isinstance(value, dt.datetime):
        return 9
    if isinstance(value, Timestamp):
        return 10
    if isinstance(value, Regex | re.Pattern):
        return 11
    if isinstance(value, MaxKey):
        return 12
    raise NotImplementedError(f"fake MongoDB: no BSON order for {type(value).__name__}")


def _number(value: Any) -> Any:
    return value.to_decimal() if isinstance(value, Decimal128) else value


def compare(a: Any, b: Any) -> int:
    """-1, 0 or 1 in BSON order (across types by type rank)."""
    ra, rb = type_rank(a), type_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra in (0, 1, 12):
        return 0
    if ra == 4:
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=False):
            c = compare(va, vb) if ka == kb else (-1 if ka < kb else 1)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    if ra == 5:
        for va, vb in zip(a, b, strict=False):
            c = compare(va, vb)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    if ra == 2:
        a, b = _number(a), _number(b)
    elif ra == 7:
        a, b = a.binary, b.binary
    elif ra == 10:
        a, b = (a.time, a.inc), (b.time, b.inc)
    elif ra == 11:
        a, b = (a.pattern, str(a.flags)), (b.pattern, str(b.flags))
    return (a > b) - (a < b)


sort_key = functools.cmp_to_key(compare)


def equal(a: Any, b: Any) -> bool:
    """BSON equality: numbers across types, documents field order included."""
    if type_rank(a) != type_rank(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(equal(a[k], b[k]) for k in a)
    return compare(a, b) == 0


def hashable(value: Any) -> Any:
    """A dict key for a value, equal exactly when the values are `equal`."""
    rank = type_rank(value)
    if rank == 2:
        return (2, float(_number(value)) if not isinstance(value, int) else value)
    if rank == 4:
        return (4, tuple((k, hashable(v)) for k, v in value.items()))
    if rank == 5:
        return (5, tuple(hashable(v) for v in value))
    if rank in (0, 1, 12):
        return (rank,)
    return (rank, value)


# -- paths ---------------------------------------------------------------------------------


def resolve(value: Any, parts: list[str]) -> Iterator[Any]:
    """The values a dotted path reaches, through arrays of documents as MongoDB does;
    MISSING where it reaches nothing."""
    if not parts:
        yield value
        return
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        yield from resolve(value[head], rest) if head in value else iter((MISSING,))
        return
    if isinstance(value, list):
        found = False
        if head.isdigit() and int(head) < len(value):
            found = True
            yield from resolve(value[int(head)], rest)
        for element in value:
            if isinstance(element, dict):
                found = True
                yield from resolve(element, parts)
        if not found:
            yield MISSING
        return
    yield MISSING


def get_path(doc: Doc, path: str) -> Any:
    """The single value at a path without arrays in it (MISSING if none)."""
    value: Any = doc
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value
