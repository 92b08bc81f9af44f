"""OpenAPI: declared problem responses, request bodies read by hand, the schema hook."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from timer_service.api.console_schemas import BulkIn
from timer_service.api.problems import PROBLEM_MEDIA_TYPE, TITLES
from timer_service.api.schemas import (
    BizTypeIn,
    BizTypePatchIn,
    JobBatchIn,
    JobCreateIn,
    JobPatchIn,
    ProblemOut,
    ScheduleIn,
    SecretRotateIn,
)
from timer_service.api.token_schemas import TokenIn

REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    BizTypeIn,
    BizTypePatchIn,
    SecretRotateIn,
    JobCreateIn,
    JobBatchIn,
    JobPatchIn,
    BulkIn,
    ScheduleIn,
    TokenIn,
)

_DESCRIPTIONS = {
    400: "The body is not valid JSON",
    401: "Missing, unknown or revoked bearer token",
    403: "The token's role or biz types do not allow this; nothing was changed",
    404: "Not found",
    409: "Conflicts with the resource's state",
    412: "If-Match names a version that is not the current one",
    413: "Body or payload too large",
    415: "The body is not JSON (Content-Type application/json)",
    422: "A body, path or query parameter breaks a rule",
    500: "Unexpected error",
    503: "Not ready",
}

RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": "Seconds to wait before sending the request again",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def retry_after(status: int, description: str) -> dict[int | str, dict[str, Any]]:
    """A `responses=` entry for a problem that says when to come back."""
    return {
        status: {"model": ProblemOut, "description": description, "headers": RETRY_AFTER_HEADER}
    }


# Every /v1 operation may be shed by the admission gate (api/admission.py) or find the
# store not answering: both 503 with Retry-After (docs/operations.md, "Overload").
GATED_RESPONSES = retry_after(
    503,
    "Overloaded (at TIMER_API_MAX_INFLIGHT requests at work) or the store is not"
    " answering: nothing was done; retry after Retry-After seconds",
)
# A create over its biz type's registration quota (timer_service/quota.py).
OVER_QUOTA_RESPONSES = retry_after(
    429,
    "The biz type's registration quota is used up on this API process: nothing was"
    " written; retry after Retry-After seconds",
)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries for problem documents (media type fixed up in `openapi`)."""
    return {
        status: {
            "model": ProblemOut,
            "description": _DESCRIPTIONS.get(status, TITLES[status]),
        }
        for status in statuses
    }


def json_body(
    model: type[BaseModel],
    required: bool = True,
    media_types: Sequence[str] = ("application/json",),
) -> dict[str, Any]:
    """`openapi_extra=` for a handler that parses its JSON body itself."""
    schema = {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
    return {
        "requestBody": {
            "required": required,
            "content": {media_type: schema for media_type in media_types},
        }
    }


def operation_id(route: APIRoute) -> str:
    """An operation's id: its handler's name in camelCase (`put_biz_type` -> `putBizType`),
    what generated clients name their methods."""
    first, *rest = route.name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        _, defs = models_json_schema(
            [(m, "validation") for m in REQUEST_MODELS],
            ref_template="#/components/schemas/{model}",
        )
        for name, definition in defs.get("$defs", {}).items():
            components.setdefault(name, definition)
        _problem_media_types(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _problem_media_types(schema: dict[str, Any]) -> None:
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content")
                if not status.isdigit() or int(status) < 400 or not content:
                    continue
                if "application/json" in content:
                    content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")
