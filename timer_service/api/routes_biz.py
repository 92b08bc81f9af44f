"""/v1/biz-types: each business's callback, limits and retry policy."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from timer_service.access import Role
from timer_service.api.access import GrantDep, check_role, requires, visible_biz_types
from timer_service.api.biz_config import biz_from_config, stored_config
from timer_service.api.biz_versions import (
    biz_response,
    check_preconditions,
    etag,
    is_conditional,
)
from timer_service.api.bodies import invalid, parse_json, read_json, validate
from timer_service.api.context import ApiContext, Context
from timer_service.api.docs import json_body, problems
from timer_service.api.merge_patch import merge_patch
from timer_service.api.problems import Problem, field_error
from timer_service.api.schemas import (
    BizTypeIn,
    BizTypeListOut,
    BizTypeOut,
    BizTypePatchIn,
    SecretRotatedOut,
    SecretRotateIn,
)
from timer_service.audit import AuditAction
from timer_service.constants import BIZ_TYPE_PATTERN
from timer_service.errors import VersionMismatch
from timer_service.signing import generate_secret

BizTypePath = Annotated[str, Path(pattern=BIZ_TYPE_PATTERN)]

MERGE_PATCH = "application/merge-patch+json"

# A PATCH that lost the race to another write applies itself again over the version
# that won (a merge patch means "these fields, whatever the rest is"); it answers 409 only
# when it loses twice in a row (docs/api.md, "PATCH /v1/biz-types/{biz_type}").
PATCH_TRIES = 2

router = APIRouter(prefix="/v1", tags=["biz types"], responses=problems(401, 500))


def unknown(biz_type: str) -> Problem:
    return Problem(404, f"No biz type {biz_type!r}.")


def refuse_target(ctx: ApiContext, callback_url: str) -> None:
    refusal = ctx.target_policy.url_refusal(callback_url)
    if refusal is not None:  # docs/operations.md, "Callback targets"
        raise invalid([field_error(("body", "callback_url"), refusal)])


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
    dependencies=[requires(Role.OPERATOR, "path")],
)
async def put_biz_type(
    biz_type: BizTypePath, request: Request, ctx: Context, grant: GrantDep
) -> Response:
    config = validate(BizTypeIn, await read_json(request))
    refuse_target(ctx, config.callback_url)
    store = ctx.store.biz_types
    existing = await store.get_biz_type(biz_type)
    if existing is None:
        check_role(grant, Role.ADMIN)  # replacing is an operator's; creating an admin's
    check_preconditions(request, existing)
    now = ctx.clock.now_ms()
    biz = biz_from_config(biz_type, config, now, existing)
    conditional = is_conditional(request)
    # Below admin, replace only the version read: a delete meanwhile must not let an
    # operator create the biz type anew.
    guarded = conditional or not grant.allows(Role.ADMIN)
    was_created = await store.put_biz_type(
        biz,
        only_if_updated_at=existing.updated_at if guarded and existing else None,
        create_only=conditional and existing is None,
    )
    stored = await store.get_biz_type(biz_type) or biz
    detail = {"created": was_created, "paused": stored.paused}
    if existing is not None and existing.paused != stored.paused:
        detail["was_paused"] = existing.paused
    await ctx.audit(request, AuditAction.BIZ_TYPE_PUT, biz_type, detail=detail)
    response = biz_response(stored, now, 201 if was_created else 200)
    if was_created:
        response.headers["Location"] = f"/v1/biz-types/{biz_type}"
    return response


@router.patch(
    "/biz-types/{biz_type}",
    summary="Change some fields of a biz type (JSON Merge Patch)",
    description=(
        "The body is a JSON Merge Patch (RFC 7396) of the stored config, sent as"
        f" `{MERGE_PATCH}` or `application/json`: an absent field keeps its value"
        " (the signing secret included), `null` resets a field to its default, `retry`"
        ' merges field by field. `{"paused": true}` pauses and changes nothing else.'
        " 422 when the result is not a valid config (nothing changes). `If-Match`"
        " patches only the version read (412). A PATCH that loses a race with another"
        " write applies itself once more over the winner, and answers 409 if it loses"
        " again."
    ),
    response_model=BizTypeOut,
    responses=problems(400, 404, 409, 412, 413, 415, 422),
    openapi_extra=json_body(BizTypePatchIn, media_types=(MERGE_PATCH, "application/json")),
    dependencies=[requires(Role.OPERATOR, "path")],
)
async def patch_biz_type(biz_type: BizTypePath, request: Request, ctx: Context) -> Response:
    patch = await read_json(request)
    validate(BizTypePatchIn, patch)
    store = ctx.store.biz_types
    for _ in range(PATCH_TRIES):
        existing = await store.get_biz_type(biz_type)
        if existing is None:
            raise unknown(biz_type)
        check_preconditions(request, existing)
        config = validate(BizTypeIn, merge_patch(stored_config(existing), patch))
        if config.callback_url != existing.callback_url:
            refuse_target(ctx, config.callback_url)
        now = ctx.clock.now_ms()
        biz = biz_from_config(biz_type, config, now, existing)
        try:
            await store.put_biz_type(biz, only_if_updated_at=existing.updated_at)
        except VersionMismatch:
            continue
        detail = {"fields": sorted(patch), "paused": biz.paused}
        if existing.paused != biz.paused:
            detail["was_paused"] = existing.paused
        await ctx.audit(request, AuditAction.BIZ_TYPE_PATCH, biz_type, detail=detail)
        return biz_response(biz, now)
    raise Problem(
        409, "The biz type kept changing while it was patched; nothing was changed. Retry."
    )


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
    dependencies=[requires(Role.OPERATOR, "path")],
)
async def rotate_secret(biz_type: BizTypePath, request: Request, ctx: Context) -> Response:
    raw = await request.body()
    rotation = validate(SecretRotateIn, parse_json(raw) if raw.strip() else {})
    store = ctx.store.biz_types
    biz = await store.get_biz_type(biz_type)
    if biz is None:
        raise unknown(biz_type)
    now = ctx.clock.now_ms()
    new_secret = rotation.signing_secret or generate_secret()
    rotated = biz.rotate_secret(new_secret, rotation.keep_previous_for_s * 1000, now)
    rotated = replace(rotated, updated_at=max(now, biz.updated_at + 1))  # see biz_from_config
    try:  # over the version read only: a PUT in between is not undone
        await store.put_biz_type(rotated, only_if_updated_at=biz.updated_at)
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
    dependencies=[requires(Role.VIEWER)],
)
async def list_biz_types(ctx: Context, grant: GrantDep) -> Response:
    items = await visible_biz_types(ctx.store.biz_types, grant)
    now = ctx.clock.now_ms()
    return JSONResponse({"items": [biz.to_public(now) for biz in items]})


@router.get(
    "/biz-types/{biz_type}",
    summary="Read a biz type (never its signing secret), with its `ETag`",
    response_model=BizTypeOut,
    responses=problems(404, 422),
    dependencies=[requires(Role.VIEWER, "path")],
)
async def get_biz_type(biz_type: BizTypePath, ctx: Context) -> Response:
    biz = await ctx.store.biz_types.get_biz_type(biz_type)
    if biz is None:
        raise unknown(biz_type)
    return biz_response(biz, ctx.clock.now_ms())


@router.delete(
    "/biz-types/{biz_type}",
    summary="Delete a biz type that has no pending or dispatched jobs",
    description=(
        "409 while it has pending or dispatched jobs, or when a create of its jobs raced"
        " the delete and got in first. A create racing a delete is either accepted first"
        " (and the delete answers 409) or refused with 422, never both a 201 and a 204."
    ),
    status_code=204,
    response_class=Response,
    responses=problems(404, 409, 422),
    dependencies=[requires(Role.ADMIN, "path")],
)
async def delete_biz_type(biz_type: BizTypePath, request: Request, ctx: Context) -> Response:
    if not await ctx.store.biz_types.delete_biz_type(biz_type):
        raise unknown(biz_type)
    await ctx.audit(request, AuditAction.BIZ_TYPE_DELETE, biz_type)
    return Response(status_code=204)
