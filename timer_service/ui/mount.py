"""Serve the console's static files at /ui/ and Swagger UI from local assets at /docs.

Both are outside auth (static files hold no data); the console asks for the bearer
token when an API call answers 401, then `GET /v1/tokens/self` for what it may show.
Nothing here reaches the network: every asset is a file of this package.

The console's answers carry a Content-Security-Policy of its own origin only: it has no
inline script or style (everything is built with the DOM API from js/ modules), so
neither is allowed, and a script injected through data shown on a page cannot run. It
may not be framed (`frame-ancestors 'none'`, and `X-Frame-Options` for older browsers:
no clickjacking of Cancel or Replay), and `nosniff` keeps a file served as one type
from being run as another.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HERE = Path(__file__).parent
CONSOLE_DIR = HERE / "static"
SWAGGER_DIR = HERE / "swagger"
CONSOLE_PATH = "/ui"
DOCS_PATH = "/docs"
DOCS_ASSETS_PATH = "/docs/assets"
FAVICON_PATH = f"{CONSOLE_PATH}/favicon.svg"

# Swagger UI's defaults that would reach the network: the validator badge (fetched
# from validator.swagger.io for every document).
SWAGGER_PARAMETERS = {"validatorUrl": None, "deepLinking": True, "persistAuthorization": True}


CONSOLE_CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
CONSOLE_HEADERS = {
    "Content-Security-Policy": CONSOLE_CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Adds `headers` to every response of the wrapped app."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.raw]
            await send(message)

        await self.app(scope, receive, with_headers)


def install_console(app: FastAPI) -> None:
    """`GET /ui/` serves the console; `/ui` redirects there (relative asset paths)."""

    @app.get(CONSOLE_PATH, include_in_schema=False)
    async def console_redirect() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE_PATH}/", status_code=308, headers=CONSOLE_HEADERS)

    files = StaticFiles(directory=CONSOLE_DIR, html=True)
    app.mount(CONSOLE_PATH, SecurityHeaders(files, CONSOLE_HEADERS), name="console")


def install_docs(app: FastAPI) -> None:
    """`GET /docs`: Swagger UI over /openapi.json, its script and style served locally."""

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API docs",
            swagger_js_url=f"{DOCS_ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=FAVICON_PATH,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )

    app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=SWAGGER_DIR), name="docs-assets")
