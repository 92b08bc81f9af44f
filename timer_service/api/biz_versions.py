"""A biz type's version as HTTP sees it: its `ETag`, and the `If-Match` /
`If-None-Match` preconditions of a write (RFC 9110)."""

from __future__ import annotations

import hashlib
import json

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from timer_service.api.problems import Problem
from timer_service.model import BizType


def etag(biz: BizType) -> str:
    """The stored version's entity tag: a digest of what the API shows of it (never the
    secret), `updated_at` included, so every write makes a new one."""
    shown = json.dumps(biz.to_public(), sort_keys=True, separators=(",", ":"))
    return '"' + hashlib.sha256(shown.encode()).hexdigest()[:32] + '"'


def biz_response(biz: BizType, now_ms: int, status: int = 200) -> Response:
    return JSONResponse(biz.to_public(now_ms), status, headers={"ETag": etag(biz)})


def _tags(header: str) -> list[str]:
    return [tag.strip() for tag in header.split(",") if tag.strip()]


def is_conditional(request: Request) -> bool:
    return "if-match" in request.headers or "if-none-match" in request.headers


def check_preconditions(request: Request, existing: BizType | None) -> None:
    """`If-Match` and `If-None-Match: *` on a write: 412 when they do not hold."""
    if_match = request.headers.get("if-match")
    if if_match is not None:
        tags = _tags(if_match)
        current = etag(existing) if existing is not None else None
        if current is None or ("*" not in tags and current not in tags):
            shown = "no biz type" if current is None else f"ETag {current}"
            raise Problem(412, f"If-Match {if_match} does not match the current version ({shown}).")
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None and existing is not None:
        tags = _tags(if_none_match)
        if "*" in tags or etag(existing) in tags:
            raise Problem(412, f"If-None-Match {if_none_match}: the biz type exists.")
