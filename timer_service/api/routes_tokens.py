"""/v1/tokens: access tokens, created and revoked by an admin; `/v1/tokens/self` tells a
caller what its own token may do (the console hides what it may not)."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from timer_service.access import AccessToken, Grant, Role, hash_token, new_secret, new_token_id
from timer_service.api.access import requires
from timer_service.api.bodies import read_json, validate
from timer_service.api.context import Context
from timer_service.api.docs import json_body, problems
from timer_service.api.problems import Problem
from timer_service.api.token_schemas import NewTokenOut, TokenIn, TokenListOut, WhoAmIOut
from timer_service.api.token_table import TokenTable
from timer_service.audit import ALL_BIZ_TYPES, AuditAction

router = APIRouter(prefix="/v1", tags=["tokens"], responses=problems(401, 500))

TokenIdPath = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
# Only an admin of every biz type manages tokens: a token may not reach beyond its maker.
TOKEN_ADMIN = requires(Role.ADMIN, every_biz_type=True)


def token_table(request: Request) -> TokenTable:
    return cast(TokenTable, request.app.state.tokens)


@router.post(
    "/tokens",
    summary="Create an access token (its secret is in this answer only)",
    status_code=201,
    response_model=NewTokenOut,
    responses=problems(400, 409, 415, 422),
    openapi_extra=json_body(TokenIn),
    dependencies=[TOKEN_ADMIN],
)
async def create_token(ctx: Context, request: Request) -> Response:
    table = token_table(request)
    if not table.enabled:
        raise Problem(
            409,
            "The API is open (TIMER_API_TOKEN is unset): tokens would not be asked for."
            " Set TIMER_API_TOKEN, then create tokens with it.",
        )
    body = validate(TokenIn, await read_json(request))
    secret = new_secret()
    token = AccessToken(
        id=new_token_id(),
        name=body.name,
        role=Role(body.role),
        biz_types=tuple(body.biz_types),
        created_at=ctx.clock.now_ms(),
        token_hash=hash_token(secret),
    )
    await ctx.store.tokens.create_token(token)
    table.invalidate()
    await ctx.audit(request, AuditAction.TOKEN_CREATE, ALL_BIZ_TYPES, detail=token.to_public())
    headers = {"Location": f"/v1/tokens/{token.id}"}
    return JSONResponse({**token.to_public(), "token": secret}, 201, headers=headers)


@router.get(
    "/tokens",
    summary="The access tokens, without their secrets",
    response_model=TokenListOut,
    dependencies=[TOKEN_ADMIN],
)
async def list_tokens(ctx: Context) -> Response:
    tokens = await ctx.store.tokens.list_tokens()
    return JSONResponse({"items": [t.to_public() for t in tokens]})


@router.get(
    "/tokens/self",
    summary="The caller's own token: its name, role and biz types",
    response_model=WhoAmIOut,
)
async def who_am_i(request: Request, grant: Annotated[Grant, requires(Role.VIEWER)]) -> Response:
    return JSONResponse({**grant.to_public(), "auth": token_table(request).enabled})


@router.delete(
    "/tokens/{token_id}",
    summary="Revoke an access token: refused by every API replica within 5 s",
    status_code=204,
    responses=problems(404, 422),
    dependencies=[TOKEN_ADMIN],
)
async def delete_token(ctx: Context, request: Request, token_id: TokenIdPath) -> Response:
    if not await ctx.store.tokens.delete_token(token_id):
        raise Problem(404, f"No token {token_id!r}.")
    token_table(request).invalidate()
    await ctx.audit(request, AuditAction.TOKEN_DELETE, ALL_BIZ_TYPES, detail={"id": token_id})
    return Response(status_code=204)
