"""/v1/biz-types: each business's callback, limits and retry policy."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from timer_service.api.bodies import invalid, parse_json, read_json, validate
from timer_service.api.context import ApiContext
from timer_service.api.docs import json_body, problems
from timer_service.api.problems import Problem, field_error
from timer_service.api.schemas import (
    BizTypeIn,
    BizTypeListOut,
    BizTypeOut,
    SecretRotatedOut,
    SecretRotateIn,
)
from timer_service.audit import AuditAction
from timer_service.constants import BIZ_TYPE_PATTERN
from timer_service.errors import VersionMismatch
from timer_service.model import BizType, RetryPolicy
from timer_service.quota import default_registration_burst
from timer_service.signing import generate_secret

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]


def etag(biz: BizType) -> str:
    """The stored version's entity tag: a digest of what the API shows of it (never the
    secret), `updated_at` included, so every PUT or rotation makes a new one."""
    shown = json.dumps(biz.to_public(), sort_keys=True, separators=(",", ":"))
    return '"' + hashlib.sha256(shown.encode()).hexdigest()[:32] + '"'


def biz_response(biz: BizType, now_ms: int, status: int = 200) -> Response:
    return JSONResponse(biz.to_public(now_ms), status, headers={"ETag": etag(biz)})


def _tags(header: str) -> list[str]:
    return [tag.strip() for tag in header.split(",") if tag.strip()]


def check_preconditions(request: Request, existing: BizType | None) -> None:
    """RFC 9110 `If-Match` and `If-None-Match: *` on a PUT: 412 when they do not hold."""
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


def registration_burst(config: BizTypeIn) -> int | None:
    """The burst stored: as given, else one second's worth of a quota that has a rate."""
    if config.registration_burst is not None or config.registration_rate_per_s is None:
        return config.registration_burst
    return default_registration_burst(config.registration_rate_per_s)


def build_biz_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["biz types"], responses=problems(401, 500))
    store, clock = ctx.store, ctx.clock
    target_policy = ctx.settings.callback_target_policy()

    @router.put(
        "/biz-types/{biz_type}",
        summary="Create or replace a biz type",
        description=(
            "201 with `Location` when created, 200 when replaced; both carry the new `ETag`."
            " `If-Match: <etag>` (from a GET) replaces only the version read, else 412:"
            " no lost update when two operators edit at once. `If-None-Match: *` only"
            " creates."
        ),
        response_model=BizTypeOut,
        responses={
            201: {"model": BizTypeOut, "description": "Created"},
            **problems(400, 412, 413, 415, 422),
        },
        openapi_extra=json_body(BizTypeIn),
    )
    async def put_biz_type(biz_type: BizTypePath, request: Request) -> Response:
        config = validate(BizTypeIn, await read_json(request))
        refusal = target_policy.url_refusal(config.callback_url)
        if refusal is not None:  # docs/operations.md, "Callback targets"
            raise invalid([field_error(("body", "callback_url"), refusal)])
        existing = await store.biz_types.get_biz_type(biz_type)
        check_preconditions(request, existing)
        # Every write moves `updated_at` on, so it names the version: a conditional
        # PUT writes only over the version its preconditions were checked against.
        now = clock.now_ms()
        version_at = now if existing is None else max(now, existing.updated_at + 1)
        conditional = "if-match" in request.headers or "if-none-match" in request.headers
        biz = BizType(
            biz_type=biz_type,
            callback_url=config.callback_url,
            rate_limit_per_s=config.rate_limit_per_s,
            burst=config.burst,
            max_concurrency=config.max_concurrency,
            timeout_ms=config.timeout_ms,
            retry=RetryPolicy(**config.retry.model_dump()),
            signing_secret=config.signing_secret,
            paused=config.paused,
            registration_rate_per_s=config.registration_rate_per_s,
            registration_burst=registration_burst(config),
            created_at=now,
            updated_at=version_at,
        )
        if existing is not None:
            biz = existing.replaced_by(biz, now)
        was_created = await store.biz_types.put_biz_type(
            biz,
            only_if_updated_at=existing.updated_at if conditional and existing else None,
            create_only=conditional and existing is None,
        )
        stored = await store.biz_types.get_biz_type(biz_type) or biz
        detail = {"created": was_created, "paused": stored.paused}
        if existing is not None and existing.paused != stored.paused:
            detail["was_paused"] = existing.paused
        await ctx.audit(request, AuditAction.BIZ_TYPE_PUT, biz_type, detail=detail)
        response = biz_response(stored, now, 201 if was_created else 200)
        if was_created:
            response.headers["Location"] = f"/v1/biz-types/{biz_type}"
        return response

    @router.post(
        "/biz-types/{biz_type}/secret:rotate",
        summary="Give a biz type a new signing secret, shown once in the answer",
        description=(
            "Callbacks are signed with the new secret from now on and, for"
            " `keep_previous_for_s`, with the secret it replaces too (two `v1,` entries in"
            " `webhook-signature`), so receivers can switch over without losing a callback."
            " A secret still kept from an earlier rotation is dropped. An empty body takes"
            " the defaults."
        ),
        response_model=SecretRotatedOut,
        responses=problems(400, 404, 409, 413, 415, 422),
        openapi_extra=json_body(SecretRotateIn, required=False),
    )
    async def rotate_secret(biz_type: BizTypePath, request: Request) -> Response:
        raw = await request.body()
        rotation = validate(SecretRotateIn, parse_json(raw) if raw.strip() else {})
        biz = await store.biz_types.get_biz_type(biz_type)
        if biz is None:
            raise Problem(404, f"No biz type {biz_type!r}.")
        now = clock.now_ms()
        new_secret = rotation.signing_secret or generate_secret()
        rotated = biz.rotate_secret(new_secret, rotation.keep_previous_for_s * 1000, now)
        rotated = replace(rotated, updated_at=max(now, biz.updated_at + 1))  # see the PUT
        try:  # over the version read only: a PUT in between is not undone
            await store.biz_types.put_biz_type(rotated, only_if_updated_at=biz.updated_at)
        except VersionMismatch:
            raise Problem(
                409, "The biz type changed while its secret was rotated; nothing was changed."
            ) from None
        detail = {"keep_previous_for_s": rotation.keep_previous_for_s}
        await ctx.audit(request, AuditAction.BIZ_TYPE_ROTATE_SECRET, biz_type, detail=detail)
        body = {**rotated.to_public(now), "signing_secret": new_secret}
        return JSONResponse(body, headers={"ETag": etag(rotated)})

    @router.get(
        "/biz-types",
        summary="List biz types",
        response_model=BizTypeListOut,
    )
    async def list_biz_types() -> Response:
        items = await store.biz_types.list_biz_types()
        now = clock.now_ms()
        return JSONResponse({"items": [biz.to_public(now) for biz in items]})

    @router.get(
        "/biz-types/{biz_type}",
        summary="Read a biz type (never its signing secret), with its `ETag`",
        response_model=BizTypeOut,
        responses=problems(404, 422),
    )
    async def get_biz_type(biz_type: BizTypePath) -> Response:
        biz = await store.biz_types.get_biz_type(biz_type)
        if biz is None:
            raise Problem(404, f"No biz type {biz_type!r}.")
        return biz_response(biz, clock.now_ms())

    @router.delete(
        "/biz-types/{biz_type}",
        summary="Delete a biz type that has no pending or dispatched jobs",
        status_code=204,
        response_class=Response,
        responses=problems(404, 409, 422),
    )
    async def delete_biz_type(biz_type: BizTypePath, request: Request) -> Response:
        if not await store.biz_types.delete_biz_type(biz_type):
            raise Problem(404, f"No biz type {biz_type!r}.")
        await ctx.audit(request, AuditAction.BIZ_TYPE_DELETE, biz_type)
        return Response(status_code=204)

    return router
