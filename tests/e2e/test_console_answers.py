"""What the endpoint answered on attempt 3, from the console alone, in headless Chromium
against a real `timer-service dev` (fixtures of test_console.py): the job page lists
each attempt's answer, and opening one shows its kept headers and the body's first KiB.
`CONSOLE_SCREENSHOTS=1` also writes docs/console/attempt-answer.png."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e import test_console as shared
from tests.e2e.console_support import SwitchableReceiver, screenshot
from tests.e2e.test_console import create_jobs, delivered, put_biz

pytestmark = pytest.mark.e2e

# The fixtures of test_console.py, for a stack and a browser of this module's own.
stack, client, browser, page, receiver = (
    shared.stack,
    shared.client,
    shared.browser,
    shared.page,
    shared.receiver,
)


def answer(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    attempt = body["attempt"]
    if attempt == 1:
        return 503, {"Content-Type": "text/plain", "Retry-After": "0"}, b"warming up"
    if attempt == 2:
        return 504, {"Content-Type": "text/html"}, b"<html><body>gateway timeout</body></html>"
    if attempt == 3:
        problem = {
            "type": "https://shop.example/problems/db-down",
            "title": "Orders database unavailable",
            "detail": f"order {body['payload']['order']} not saved: primary stepped down",
        }
        headers = {"Content-Type": "application/problem+json", "X-Request-Id": "req-7f3a"}
        return 500, headers, json.dumps(problem, indent=2).encode()
    return 200, {"Content-Type": "application/json"}, b'{"saved":true}'


def test_the_job_page_shows_what_the_endpoint_answered_on_attempt_3(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-answers"
    retry = {"max_attempts": 5, "initial_backoff_ms": 200, "max_backoff_ms": 400}
    put_biz(client, biz, receiver, retry=retry)
    receiver.answer_for = answer
    job = {"biz_type": biz, "job_id": "order-42", "delay_ms": 0, "payload": {"order": 42}}
    create_jobs(client, [job])
    delivered(client, f"/v1/jobs/{biz}/order-42", timeout_s=60)

    page.goto(f"/ui/#/job/{biz}/order-42")
    expect(page.get_by_test_id("job-state")).to_have_text("delivered")
    rows = page.get_by_test_id("attempt-row")
    expect(rows).to_have_count(4)
    third = page.locator('[data-testid="answer"][data-attempt="3"]')
    # Closed, it says the problem's detail in one line; open, all that was kept.
    expect(third.get_by_test_id("answer-summary")).to_contain_text("order 42 not saved")
    expect(third.get_by_test_id("answer-body")).not_to_be_visible()  # closed until asked
    third.get_by_test_id("answer-summary").click()
    expect(third.get_by_test_id("answer-headers")).to_contain_text("X-Request-Id")
    expect(third.get_by_test_id("answer-headers")).to_contain_text("req-7f3a")
    expect(third.get_by_test_id("answer-headers")).to_contain_text("application/problem+json")
    expect(third.get_by_test_id("answer-body")).to_contain_text(
        '"title": "Orders database unavailable"'
    )
    first = page.locator('[data-testid="answer"][data-attempt="1"]')
    expect(first.get_by_test_id("answer-summary")).to_have_text("warming up")
    screenshot(page, "attempt-answer", scroll_to=page.get_by_test_id("history"))
