"""Serve the console's static files at /ui/ and Swagger UI from local assets at /docs.

Both are outside auth (static files hold no data); the console asks for the bearer
token when an API call answers 401. Nothing here reaches the network: every asset
is a file of this package.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

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


def install_console(app: FastAPI) -> None:
    """`GET /ui/` serves the console; `/ui` redirects there (relative asset paths)."""

    @app.get(CONSOLE_PATH, include_in_schema=False)
    async def console_redirect() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE_PATH}/", status_code=308)

    app.mount(CONSOLE_PATH, StaticFiles(directory=CONSOLE_DIR, html=True), name="console")


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
