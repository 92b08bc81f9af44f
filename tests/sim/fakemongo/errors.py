"""Write errors as PyMongo raises them: a one-statement write's `DuplicateKeyError` /
`WriteError` with the write error as `details`, a bulk's per-statement entries, and
a command's `OperationFailure` with the server's reply as `details`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

from tests.sim.fakemongo.engine import DUPLICATE_KEY, DuplicateKey
from tests.sim.fakemongo.update import UpdateFailure
from tests.sim.fakemongo.values import Doc

T = TypeVar("T")


def single_write(statement: Callable[[], T], op: Any) -> T:
    """A one-statement write as PyMongo raises its write error."""
    try:
        return statement()
    except UpdateFailure as exc:
        details = write_error(exc, 0)
        if exc.code == DUPLICATE_KEY:
            raise DuplicateKeyError(exc.message, DUPLICATE_KEY, details) from None
        raise WriteError(exc.message, exc.code, details) from None


def write_error(exc: UpdateFailure, index: int) -> Doc:
    error: Doc = {"index": index, "code": exc.code, "errmsg": exc.message}
    if isinstance(exc, DuplicateKey):
        error["keyPattern"] = exc.key_pattern
        error["keyValue"] = exc.key_value
    return error


def command_error(exc: UpdateFailure) -> OperationFailure:
    """A failed command's error, as PyMongo raises it from the command's reply."""
    reply: Doc = {"ok": 0.0, "errmsg": exc.message, "code": exc.code}
    if isinstance(exc, DuplicateKey):
        reply.update(codeName="DuplicateKey", keyPattern=exc.key_pattern, keyValue=exc.key_value)
        return DuplicateKeyError(exc.message, DUPLICATE_KEY, reply)
    return OperationFailure(exc.message, exc.code, reply)
