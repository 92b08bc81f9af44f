"""The console (/ui/) and the API docs (/docs) are served from the package's own files:
no reference leaves the service, every module the page imports is there, no token needed."""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.unit.api_harness import new_app
from timer_service.clock import FakeClock
from timer_service.lateness import BREAKDOWN_MEMBERS, WaitingFor
from timer_service.metrics import Metrics
from timer_service.store.memory import MemoryStore
from timer_service.ui.mount import CONSOLE_DIR, SWAGGER_DIR

ROOT = Path(__file__).resolve().parents[2]
# src= / href= / url(...) / import ... from "..." in HTML, CSS and JS modules.
REFERENCE = re.compile(
    r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\(\s*["']?([^"')]+)|from\s+["']([^"']+)["']"""
)


@pytest.fixture(params=[None, "t0ken"], ids=["open", "token"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    store = MemoryStore(buckets=60, retention_ms=86_400_000)
    await store.setup()
    settings = {"api_token": request.param}
    app = new_app(store, Metrics(), FakeClock(1_767_225_600_000), settings)
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client


def references(text: str) -> list[str]:
    return [next(g for g in match.groups() if g) for match in REFERENCE.finditer(text)]


def is_external(reference: str) -> bool:
    return bool(re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", reference, re.I))


async def test_ui_serves_the_page_outside_auth(client: httpx.AsyncClient) -> None:
    page = await client.get("/ui/")
    assert page.status_code == 200, f"expected 200, got {page.status_code}: {page.text[:200]}"
    assert page.headers["content-type"].startswith("text/html"), page.headers
    assert '<script type="module" src="js/main.js">' in page.text, page.text[:500]
    redirect = await client.get("/ui", follow_redirects=False)
    assert (redirect.status_code, redirect.headers.get("location")) == (308, "/ui/"), (
        f"expected a 308 to /ui/, got {redirect.status_code} {redirect.headers}"
    )


async def test_every_asset_the_page_reaches_is_served_and_local(
    client: httpx.AsyncClient,
) -> None:
    """Follows every reference from index.html through CSS and the JS import graph."""
    seen: set[str] = set()
    todo = ["/ui/index.html"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        response = await client.get(path)
        assert response.status_code == 200, f"{path}: expected 200, got {response.status_code}"
        for reference in references(response.text):
            if reference.startswith("#"):
                continue
            assert not is_external(reference), f"{path} references {reference!r}: not local"
            target = httpx.URL(f"http://api{path}").join(reference).path
            if target.startswith("/ui/"):
                todo.append(target)
    shipped = {f"/ui/{p.relative_to(CONSOLE_DIR)}" for p in CONSOLE_DIR.rglob("*") if p.is_file()}
    assert shipped <= seen, f"files no page reaches (dead code?): {sorted(shipped - seen)}"
    js = await client.get("/ui/js/main.js")
    assert "javascript" in js.headers["content-type"], js.headers


async def test_docs_reference_no_external_url_and_assets_are_served(
    client: httpx.AsyncClient,
) -> None:
    docs = await client.get("/docs")
    assert docs.status_code == 200, f"expected 200, got {docs.status_code}"
    assert "SwaggerUIBundle" in docs.text, docs.text[:500]
    external = re.findall(r"https?://[^\s\"'<>]+|//[a-z0-9.-]+\.[a-z]{2,}/", docs.text)
    assert external == [], f"/docs references outside URLs: {external}"
    assert '"validatorUrl": null' in docs.text, "Swagger UI would fetch its validator badge"
    refs = references(docs.text)
    assert "/docs/assets/swagger-ui-bundle.js" in refs, refs
    assert "/docs/assets/swagger-ui.css" in refs, refs
    for ref in refs:
        asset = await client.get(ref)
        assert asset.status_code == 200, f"{ref}: expected 200, got {asset.status_code}"
        assert len(asset.content) > 100, f"{ref}: {len(asset.content)} bytes"
    schema = await client.get("/openapi.json")
    assert schema.status_code == 200, schema.status_code


async def test_redoc_is_gone_rather_than_blank(client: httpx.AsyncClient) -> None:
    response = await client.get("/redoc")
    assert response.status_code == 404, f"expected 404, got {response.status_code}"


async def test_missing_console_file_is_a_problem_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/ui/js/nope.js")
    assert response.status_code == 404, f"expected 404, got {response.status_code}"
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers


def test_every_shipped_file_is_package_data() -> None:
    """A wheel carries the console and Swagger UI: pyproject's globs cover every file."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["timer_service"]
    package = ROOT / "timer_service"
    packaged = {path for glob in globs for path in package.glob(glob) if path.is_file()}
    for directory in (CONSOLE_DIR, SWAGGER_DIR):
        missing = [str(f) for f in directory.rglob("*") if f.is_file() and f not in packaged]
        assert missing == [], f"not in any package-data glob {globs}: {missing}"


def test_a_successful_attempt_shows_ok_in_the_good_colour_not_the_error_one() -> None:
    """The attempts table colours its last column by what it holds: an error in the bad
    colour, the "ok" of an attempt without one in the good colour."""
    script = (CONSOLE_DIR / "js" / "jobs_table.js").read_text()
    css = (CONSOLE_DIR / "app.css").read_text()
    ok_cells = re.findall(r'h\(\s*"td",\s*\{\s*class:\s*"([\w-]+)"\s*\},\s*"ok"\s*\)', script)
    assert ok_cells, 'no cell shows "ok" with a class of its own'
    as_error = re.search(r'h\(\s*"td",\s*\{\s*class:\s*"error-text"\s*\},[^)]*"ok"', script)
    assert as_error is None, f'"ok" shown as an error: {as_error and as_error.group(0)}'
    for css_class in ok_cells:
        rule = re.search(rf"\.{css_class}\s*\{{([^}}]*)\}}", css)
        assert rule and "var(--good)" in rule.group(1), f".{css_class} is not the good colour"
    bad = re.search(r"\.error-text\s*\{([^}]*)\}", css)
    assert bad and "var(--bad)" in bad.group(1), "errors lost their colour"


def test_the_job_view_says_why_a_late_job_is_late_in_the_domains_terms() -> None:
    """The job view puts one "why late" line under its head; the line knows every reason
    the API gives (timer_service.lateness.WaitingFor) and every breakdown member."""
    job_view = (CONSOLE_DIR / "js" / "job.js").read_text()
    script = (CONSOLE_DIR / "js" / "why_late.js").read_text()
    assert 'import { whyLateLine } from "./why_late.js"' in job_view, "job.js lost the line"
    assert re.search(r"\bwhyLateLine\(job\)", job_view), "the job details do not show it"
    reasons = set(re.findall(r"^\s+(\w+): \"", script.split("const PARTS")[0], re.M))
    assert reasons == {reason.value for reason in WaitingFor}, f"reasons in step: {reasons}"
    parts = set(re.findall(r'\["(\w+_ms)", "[\w ]+"\]', script))
    assert parts == set(BREAKDOWN_MEMBERS), f"breakdown members in step: {parts}"
    assert 'testid: "job-why-late"' in script and "if (!job.lateness) return null" in script
    css = (CONSOLE_DIR / "app.css").read_text()
    assert re.search(r"\.why-late\s*\{", css), "the line has no style"


def test_no_script_sets_an_inline_style_the_csp_would_refuse() -> None:
    """style-src 'self' refuses style attributes: charts colour their SVG by class, and
    every class a series names has a rule in app.css."""
    scripts = {p.name: p.read_text() for p in (CONSOLE_DIR / "js").glob("*.js")}
    offenders = [
        name for name, text in scripts.items() if re.search(r"\.style\b|[\"']style[\"']", text)
    ]
    assert offenders == [], f"inline style set in {offenders}"
    css = (CONSOLE_DIR / "app.css").read_text()
    series_classes = set(re.findall(r'cls: "([\w-]+)"', scripts["series.js"]))
    assert series_classes, "series.js names no series class"
    for css_class in series_classes:
        assert re.search(rf"\.{css_class}\s*\{{", css), f".{css_class} has no rule"
    assert "createElementNS" in scripts["charts.js"], "charts are not SVG built in place"
