"""Reading request bodies: bytes -> JSON (400 when not JSON) -> model (422 when invalid)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from timer_service.api.problems import Loc, Problem, summarize
from timer_service.model import encode_payload

M = TypeVar("M", bound=BaseModel)

BODY: tuple[str] = ("body",)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes) -> Any:
    """Strict RFC 8259: UTF-8 only, no NaN/Infinity."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise Problem(400, "The request body is not valid UTF-8.") from None
    except RecursionError:  # deeper than the interpreter's recursion limit
        raise Problem(400, "The request body is nested too deeply.") from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise Problem(400, f"The request body is not valid JSON: {exc}") from None


async def read_json(request: Request) -> Any:
    return parse_json(await request.body())


def pydantic_errors(exc: ValidationError, prefix: Loc) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        msg = err["msg"].removeprefix("Value error, ")
        errors.append({"loc": [*prefix, *err["loc"]], "msg": msg})
    return errors


def invalid(errors: Sequence[dict[str, Any]]) -> Problem:
    return Problem(422, summarize(errors), errors)


def validate(model: type[M], data: Any, loc: Loc = BODY) -> M:
    if not isinstance(data, dict):
        raise Problem.invalid(loc, "must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid(pydantic_errors(exc, loc)) from None


def encode_checked(payload: Any, max_bytes: int, loc: Loc) -> str:
    """The payload's stored JSON text; 413 when its encoding is over the limit."""
    try:
        text = encode_payload(payload)
        size = len(text) if text.isascii() else len(text.encode())
    except UnicodeEncodeError:  # "\ud800" is valid JSON text but no UTF-8 string
        raise Problem.invalid(loc, "must not hold a lone surrogate (\\ud800-\\udfff)") from None
    except ValueError:  # a number too large for a double (1e400) decodes to inf
        raise Problem.invalid(loc, "must hold only finite numbers") from None
    if size > max_bytes:
        raise Problem(413, f"The payload is {size} bytes encoded; the limit is {max_bytes}.")
    return text
