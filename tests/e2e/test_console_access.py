"""The console under access tokens, in headless Chromium against `timer-service dev`: it
shows who it acts as, hides the actions the token's role lacks, and runs under its
Content-Security-Policy without a violation."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import Stack, dev_stack
from tests.e2e.console_support import chromium_path

pytestmark = pytest.mark.e2e

BOOT = "console-access-token"
TOKEN_KEY = "timer-console-token"
BIZ = "team-a-orders"
expect.set_options(timeout=30_000)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    data_dir = tempfile.mkdtemp(prefix="timer-console-access-")
    built = dev_stack(data_dir, TIMER_API_TOKEN=BOOT, TIMER_CANARY_INTERVAL_MS="0")
    built.start()
    try:
        yield built
    finally:
        built.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def secrets_by_role(stack: Stack) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {BOOT}"}
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=30) as admin:
        callback = {"callback_url": "http://127.0.0.1:9/never"}
        assert admin.put(f"/v1/biz-types/{BIZ}", json=callback).status_code == 201
        made = {}
        for role in ("viewer", "operator"):
            body = {"name": f"team-a-{role}", "role": role, "biz_types": ["team-a-*"]}
            answer = admin.post("/v1/tokens", json=body)
            assert answer.status_code == 201, answer.text
            made[role] = answer.json()["token"]
        return made


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        yield browser
        browser.close()


def tab(browser: Browser, stack: Stack, secret: str) -> tuple[Page, list[str]]:
    context = browser.new_context(base_url=stack.api_url)
    context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, {secret!r})")
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on(
        "console",
        lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return page, problems


@pytest.mark.parametrize(("role", "shown"), [("viewer", False), ("operator", True)])
def test_the_console_hides_what_the_role_lacks(
    browser: Browser, stack: Stack, secrets_by_role: dict[str, str], role: str, shown: bool
) -> None:
    page, problems = tab(browser, stack, secrets_by_role[role])
    page.goto("/ui/")
    expect(page.get_by_test_id("whoami")).to_contain_text(f"team-a-{role}")
    expect(page.get_by_test_id("new-biz-type")).to_be_hidden()  # an admin's
    page.goto(f"/ui/#/biz/{BIZ}")
    toggle = page.get_by_test_id("pause-toggle")
    expect(toggle).to_have_text("Pause…")
    if shown:
        expect(toggle).to_be_visible()
    else:
        expect(toggle).to_be_hidden()
    page.context.close()
    assert problems == [], f"errors or CSP violations: {problems}"
