"""Refusing oversized requests: bodies over the size limit without reading them whole,
and more header fields than any client of this API sends."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from timer_service.api.problems import problem_response

# Apache's LimitRequestFields default. The size of the header block is capped
# below this by the HTTP server itself (h11: 16 KiB, answered 400).
MAX_HEADER_FIELDS = 100
# Header bytes (names and values) the app accepts; up to SERVER_HEADER_BYTES the HTTP
# server reads the request and this answers 431 with a problem document; beyond that
# the server itself refuses it with a plain 400 before the app sees anything.
MAX_HEADER_BYTES = 16 * 1024
SERVER_HEADER_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    """The request body is larger than allowed."""


class BodyLimitMiddleware:
    """413 up front on a Content-Length over the limit; for a body without one
    (chunked), counts bytes as they arrive and stops at the limit."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(scope, receive, send)
            return

        limit = self.max_body_bytes
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"The request body is larger than {self.max_body_bytes} bytes."
        # Connection: close tells the server not to wait for the rest of the body.
        response = problem_response(413, detail, headers={"Connection": "close"})
        await response(scope, receive, send)


class HeaderLimitMiddleware:
    """431 for a request with more than `max_fields` header fields or `max_bytes` of
    header names and values."""

    def __init__(
        self, app: ASGIApp, max_fields: int = MAX_HEADER_FIELDS, max_bytes: int = MAX_HEADER_BYTES
    ) -> None:
        self.app = app
        self.max_fields = max_fields
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            detail = self._too_large(scope["headers"])
            if detail is not None:
                response = problem_response(431, detail, headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _too_large(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        if len(headers) > self.max_fields:
            return f"The request has {len(headers)} header fields; the limit is {self.max_fields}."
        size = sum(len(name) + len(value) for name, value in headers)
        if size > self.max_bytes:
            return f"The request has {size} bytes of headers; the limit is {self.max_bytes}."
        return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
