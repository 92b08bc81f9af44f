"""The console's answers: a same-origin Content-Security-Policy with no inline script or
style (the pages have none), no framing, nosniff; and every data-needs role the pages
use is one the stylesheet hides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.api_harness import Api
from timer_service.ui.mount import CONSOLE_DIR

PATHS = ("/ui/", "/ui/index.html", "/ui/js/main.js", "/ui/app.css", "/ui/favicon.svg", "/ui")


@pytest.mark.parametrize("path", PATHS)
async def test_console_responses_send_csp_frame_and_nosniff_headers(api: Api, path: str) -> None:
    response = await api.request("GET", path)
    assert response.status_code in (200, 308), (path, response.status_code)
    csp = {
        d.split(" ", 1)[0]: d.split(" ", 1)[1]
        for d in response.headers["Content-Security-Policy"].split("; ")
    }
    assert csp["default-src"] == "'self'" and csp["script-src"] == "'self'", csp
    assert csp["style-src"] == "'self'" and csp["frame-ancestors"] == "'none'", csp
    assert "unsafe" not in str(csp), csp
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def console_files(suffix: str) -> list[Path]:
    return sorted(CONSOLE_DIR.rglob(f"*{suffix}"))


def test_the_console_has_no_inline_script_or_style_the_csp_would_block() -> None:
    html = (CONSOLE_DIR / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "an inline <script>"
    assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html), "inline style or handler"
    for js in console_files(".js"):
        text = js.read_text()
        assert "innerHTML" not in text and "eval(" not in text, js.name


def test_every_role_an_action_needs_is_hidden_by_the_stylesheet() -> None:
    needed = {
        m
        for js in console_files(".js")
        for m in re.findall(r'"data-needs": ([^,}]+)', js.read_text())
    }
    roles = set(re.findall(r'"(producer|operator|admin)"', " ".join(needed)))
    assert roles == {"producer", "operator", "admin"}, needed
    css = (CONSOLE_DIR / "app.css").read_text()
    for role in roles:
        assert f'[data-needs="{role}"]' in css, f"app.css does not hide data-needs={role}"
