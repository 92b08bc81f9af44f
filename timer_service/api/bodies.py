"""Reading request bodies: bytes -> JSON (400 when not JSON) -> model (422 when invalid)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from timer_service.api.problems import Loc, Problem, summarize
from timer_service.errors import InvalidInput, PayloadTooLarge
from timer_service.jobs import payload_json_within

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


UNKNOWN_FIELD = "is not a field of this body (misspelt?); unknown fields are refused"


def pydantic_errors(exc: ValidationError, prefix: Loc) -> list[dict[str, Any]]:
    errors = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        if err["type"] == "extra_forbidden":
            msg = UNKNOWN_FIELD
        else:
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
    """The payload's stored JSON text (`jobs.payload_json_within`) as the API answers
    it: 422 at `loc`, or 413."""
    try:
        return payload_json_within(payload, max_bytes)
    except InvalidInput as exc:
        raise Problem.invalid(loc, str(exc)) from None
    except PayloadTooLarge as exc:
        raise Problem(413, str(exc)) from None
