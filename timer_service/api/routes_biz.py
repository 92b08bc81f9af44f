"""/v1/biz-types: each business's callback, limits and retry policy."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from timer_service.api.bodies import parse_json, read_json, validate
from timer_service.api.context import ApiContext
from timer_service.api.docs import json_body, problems
from timer_service.api.problems import Problem
from timer_service.api.schemas import (
    BizTypeIn,
    BizTypeListOut,
    BizTypeOut,
    SecretRotatedOut,
    SecretRotateIn,
)
from timer_service.audit import AuditAction
from timer_service.constants import BIZ_TYPE_PATTERN
from timer_service.model import BizType, RetryPolicy
from timer_service.signing import generate_secret

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]


def build_biz_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["biz types"], responses=problems(401, 500))
    store, clock = ctx.store, ctx.clock

    @router.put(
        "/biz-types/{biz_type}",
        summary="Create or replace a biz type",
        response_model=BizTypeOut,
        responses={
            201: {"model": BizTypeOut, "description": "Created"},
            **problems(400, 413, 422),
        },
        openapi_extra=json_body(BizTypeIn),
    )
    async def put_biz_type(biz_type: BizTypePath, request: Request) -> Response:
        config = validate(BizTypeIn, await read_json(request))
        now = clock.now_ms()
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
            created_at=now,
            updated_at=now,
        )
        existing = await store.biz_types.get_biz_type(biz_type)
        if existing is not None:
            biz = existing.replaced_by(biz, now)
        was_created = await store.biz_types.put_biz_type(biz)
        stored = await store.biz_types.get_biz_type(biz_type) or biz
        detail = {"created": was_created, "paused": stored.paused}
        if existing is not None and existing.paused != stored.paused:
            detail["was_paused"] = existing.paused
        await ctx.audit(request, AuditAction.BIZ_TYPE_PUT, biz_type, detail=detail)
        return JSONResponse(stored.to_public(now), 201 if was_created else 200)

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
        responses=problems(400, 404, 413, 422),
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
        await store.biz_types.put_biz_type(rotated)
        detail = {"keep_previous_for_s": rotation.keep_previous_for_s}
        await ctx.audit(request, AuditAction.BIZ_TYPE_ROTATE_SECRET, biz_type, detail=detail)
        return JSONResponse({**rotated.to_public(now), "signing_secret": new_secret})

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
        summary="Read a biz type (never its signing secret)",
        response_model=BizTypeOut,
        responses=problems(404, 422),
    )
    async def get_biz_type(biz_type: BizTypePath) -> Response:
        biz = await store.biz_types.get_biz_type(biz_type)
        if biz is None:
            raise Problem(404, f"No biz type {biz_type!r}.")
        return JSONResponse(biz.to_public(clock.now_ms()))

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
