"""Bearer tokens: who is calling (`request.state.actor`), and a 401 for every /v1 request
without a valid token, sent before the request body is read.

Two parts on purpose. `BearerAuthMiddleware` does the check for every /v1 path, before
any route runs: a dependency would come too late (FastAPI reads a declared body before it
solves dependencies), and a route added without it would be open. The `HTTPBearer`
dependency that `create_app` puts on the /v1 routers gives the OpenAPI its bearer security
scheme (Swagger's Authorize button) and checks the token again where it is declared.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping

from fastapi import Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from timer_service.api.problems import UNAUTHORIZED, Problem, problem_response

PROTECTED_PREFIX = "/v1"
ANONYMOUS = "anonymous"  # the actor when auth is off, or on a path outside /v1
_DETAIL = "A valid 'Authorization: Bearer <token>' header is required."
# Connection: close: the server answers without waiting for (or reading) the body.
_HEADERS = {"WWW-Authenticate": "Bearer", "Connection": "close"}


class Tokens:
    """The accepted tokens by name; `actor` is the name of the token presented."""

    def __init__(self, named: Mapping[str, str]) -> None:
        self._named = [(name, token.encode()) for name, token in named.items()]

    @property
    def enabled(self) -> bool:
        return bool(self._named)

    def actor(self, presented: bytes | None) -> str | None:
        """The name whose token is `presented` (compared in constant time with every
        token, whichever matches), or None."""
        if presented is None:
            return None
        found = None
        for name, token in self._named:
            if hmac.compare_digest(presented, token):
                found = name
        return found


def bearer_credentials(header: bytes) -> bytes | None:
    scheme, _, credentials = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return credentials.strip() or None


def _authorization(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bearer_credentials(value)
    return None


class BearerAuthMiddleware:
    """Sets `scope["state"]["actor"]` (Starlette's `request.state.actor`) on every request:
    the token's name, or "anonymous" when auth is off or the path is outside /v1. A /v1
    request without a valid token is answered 401 at once, its body never read."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        protected = self.tokens.enabled and scope["path"].startswith(PROTECTED_PREFIX)
        if not protected:
            state["actor"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        actor = self.tokens.actor(_authorization(scope))
        if actor is None:
            response = problem_response(401, _DETAIL, headers=_HEADERS, type_=UNAUTHORIZED)
            await response(scope, receive, send)
            return
        state["actor"] = actor
        await self.app(scope, receive, send)


bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description=(
        "`Authorization: Bearer <token>`: TIMER_API_TOKEN, or one of TIMER_API_TOKENS."
        " Required on every /v1 path when the service has a token; no token otherwise."
    ),
)


def actor_dependency(tokens: Tokens) -> Callable[..., Awaitable[str]]:
    """The /v1 routers' dependency: the caller's name, checked again from the header."""

    async def actor(
        credentials: HTTPAuthorizationCredentials | None = Security(bearer_scheme),
    ) -> str:
        if not tokens.enabled:
            return ANONYMOUS
        # Header values arrive latin-1 decoded: encoded back, they are the bytes sent.
        presented = credentials.credentials.encode("latin-1") if credentials else None
        name = tokens.actor(presented)
        if name is None:
            raise Problem(401, _DETAIL, headers=_HEADERS, type_=UNAUTHORIZED)
        return name

    return actor
