"""Bearer-token check for every /v1 request (when a token is configured)."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from timer_service.api.problems import problem_response

PROTECTED_PREFIX = "/v1"


class BearerAuthMiddleware:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIX):
            await self.app(scope, receive, send)
            return
        if self._authorized(scope):
            await self.app(scope, receive, send)
            return
        response = problem_response(
            401,
            "A valid 'Authorization: Bearer <token>' header is required.",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                presented = b"Bearer " + credentials.strip()
                ok = scheme.lower() == b"bearer"
                return hmac.compare_digest(presented, self._expected) and ok
        return False
