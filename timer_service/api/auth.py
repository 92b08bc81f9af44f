"""Bearer tokens: who is calling (`request.state.grant`, its name as `request.state.actor`),
and a 401 for every /v1 request without a valid token, sent before the body is read.

Two parts on purpose. `BearerAuthMiddleware` finds the caller's grant for every /v1 path,
before any route runs: a dependency would come too late (FastAPI reads a declared body
before it solves dependencies), and a route added without it would be open. What the
grant allows is each route's own declaration (api/access.py, `requires`). The
`HTTPBearer` scheme that `create_app` puts on the /v1 routers documents the bearer
security scheme in the OpenAPI (Swagger's Authorize button).
"""

from __future__ import annotations

from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from timer_service.api.access import OPEN_GRANT
from timer_service.api.problems import UNAUTHORIZED, problem_response
from timer_service.api.token_table import TokenTable
from timer_service.errors import StoreUnavailable

PROTECTED_PREFIX = "/v1"
ANONYMOUS = OPEN_GRANT.name  # the actor when auth is off, or on a path outside /v1
_DETAIL = "A valid 'Authorization: Bearer <token>' header is required."
# Connection: close: the server answers without waiting for (or reading) the body.
_HEADERS = {"WWW-Authenticate": "Bearer", "Connection": "close"}
_UNAVAILABLE_HEADERS = {"Retry-After": "2", "Connection": "close"}


def bearer_credentials(header: bytes) -> bytes | None:
    scheme, _, credentials = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip() or None


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            credentials = bearer_credentials(value)
            # Header bytes as latin-1: any byte sequence maps to one string.
            return None if credentials is None else credentials.decode("latin-1")
    return None


class BearerAuthMiddleware:
    """Sets `scope["state"]["grant"]` and `["actor"]` (Starlette's `request.state`) on
    every request: the token's grant and name, or the open admin "anonymous" when auth is
    off or the path is outside /v1. A /v1 request without a valid token is answered 401
    at once, its body never read."""

    def __init__(self, app: ASGIApp, tokens: TokenTable) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        protected = self.tokens.enabled and scope["path"].startswith(PROTECTED_PREFIX)
        if not protected:
            state["grant"] = OPEN_GRANT
            state["actor"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        try:
            grant = await self.tokens.grant(_authorization(scope))
        except StoreUnavailable:
            detail = "The token table cannot be read: the store is not answering."
            response = problem_response(503, detail, headers=_UNAVAILABLE_HEADERS)
            await response(scope, receive, send)
            return
        if grant is None:
            response = problem_response(401, _DETAIL, headers=_HEADERS, type_=UNAUTHORIZED)
            await response(scope, receive, send)
            return
        state["grant"] = grant
        state["actor"] = grant.name
        await self.app(scope, receive, send)


bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description=(
        "`Authorization: Bearer <token>`: TIMER_API_TOKEN (or one of TIMER_API_TOKENS), an"
        " admin, or an access token of `POST /v1/tokens`. Required on every /v1 path when"
        " the service has a token; no token otherwise. 401: no token, an unknown or a"
        " revoked one; 403: a valid token whose role or biz types do not allow the request."
    ),
)
