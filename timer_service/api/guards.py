"""Refusals before any route runs, from the request head alone (the body is never read):
a body that is not JSON (415), a Host the API does not answer to (400).

Both close drive-by paths from a browser: a web page may POST a CORS-simple
`text/plain` (or type-less) body to a token-less API on localhost, and a page whose DNS
name is rebound to 127.0.0.1 reaches the API under its own Host name.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from timer_service.api.problems import UNKNOWN_HOST, problem_response

_CLOSE = {"Connection": "close"}  # the body is not read: the connection cannot be reused


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None


def has_body(scope: Scope) -> bool:
    """Whether the request carries a body: a non-zero Content-Length, or any
    Transfer-Encoding (chunked)."""
    if _header(scope, b"transfer-encoding") is not None:
        return True
    length = _header(scope, b"content-length")
    return length is not None and length.strip() not in (b"", b"0")


def is_json_media_type(content_type: bytes | None) -> bool:
    """`application/json` or `application/<anything>+json`, with no parameter but
    `charset=utf-8` (JSON is UTF-8, RFC 8259)."""
    if content_type is None:
        return False
    media_type, *params = content_type.decode("latin-1").lower().split(";")
    kind, _, subtype = media_type.strip().partition("/")
    if kind != "application" or not (subtype == "json" or subtype.endswith("+json")):
        return False
    for param in params:
        key, _, value = param.strip().partition("=")
        if key.strip() != "charset" or value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


class JsonBodiesOnlyMiddleware:
    """415 for a request whose body is not declared JSON; a request without a body passes
    whatever its Content-Type."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and has_body(scope):
            content_type = _header(scope, b"content-type")
            if not is_json_media_type(content_type):
                shown = "none" if content_type is None else repr(content_type.decode("latin-1"))
                detail = (
                    f"Request bodies must be JSON (Content-Type: application/json), not {shown}."
                )
                headers = {**_CLOSE, "Accept": "application/json"}
                response = problem_response(415, detail, headers=headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def host_of(header: bytes) -> str:
    """The host name of a Host header value, lower-case, without the port; an IPv6
    literal without its brackets."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """`*` allows any host, `*.example.com` any subdomain of example.com."""
    for pattern in allowed:
        if pattern == "*" or host == pattern:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


# Probes and Prometheus reach a pod by its IP, whatever names the API answers to; what
# they read tells a rebinding page nothing. The canary's callback comes by the API
# Service's name (TIMER_CANARY_URL) and counts only with its signature, which no page has.
HOST_CHECK_EXEMPT = frozenset({"/healthz", "/readyz", "/metrics", "/canary"})


class AllowedHostsMiddleware:
    """Starlette's TrustedHostMiddleware, with a problem document for the refusal, IPv6
    literals (`[::1]:8080`) read right, and the probe, metrics and canary paths left open."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.allowed_hosts = [h.strip("[]") for h in allowed_hosts]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        checked = scope["type"] == "http" and scope["path"] not in HOST_CHECK_EXEMPT
        if checked and "*" not in self.allowed_hosts:
            host = host_of(_header(scope, b"host") or b"")
            if not host_allowed(host, self.allowed_hosts):
                detail = f"This API does not answer to the host {host!r} (TIMER_ALLOWED_HOSTS)."
                response = problem_response(400, detail, headers=_CLOSE, type_=UNKNOWN_HOST)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
