"""The operator console in headless Chromium (Debian's, driven by Playwright) against a real
`timer-service dev` with a token: every action an operator takes there, and its audit entry.

One dev process and one browser for the module; each test has its own biz type and
receiver. Waits are on page state (Playwright's expect), never fixed sleeps.
`CONSOLE_SCREENSHOTS=1` also writes docs/console/*.png.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import Stack, dev_stack
from tests.e2e.console_support import SwitchableReceiver, chromium_path, screenshot
from tests.e2e.harness import now_ms
from timer_service.receiver import verify_callback

pytestmark = pytest.mark.e2e

TOKEN = "console-e2e-token"
TOKEN_KEY = "timer-console-token"  # app.js keeps the token under this sessionStorage key
UI_TIMEOUT_MS = 30_000
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BULK_JOBS = 1000
expect.set_options(timeout=UI_TIMEOUT_MS)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    data_dir = tempfile.mkdtemp(prefix="timer-console-")
    built = dev_stack(data_dir, TIMER_API_TOKEN=TOKEN, TIMER_STATS_INTERVAL_S="1")
    built.start()
    try:
        yield built
    finally:
        built.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, stack: Stack) -> Iterator[Page]:
    """A tab that already holds the token (the token prompt has its own test)."""
    context = browser.new_context(base_url=stack.api_url, viewport={"width": 1360, "height": 900})
    context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, {TOKEN!r})")
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


@pytest.fixture
def receiver() -> Iterator[SwitchableReceiver]:
    receiver = SwitchableReceiver().start()
    yield receiver
    receiver.stop()


def put_biz(client: httpx.Client, name: str, receiver: SwitchableReceiver, **config: Any) -> None:
    body = {"callback_url": receiver.url, "retry": {"max_attempts": 1}, **config}
    response = client.put(f"/v1/biz-types/{name}", json=body)
    assert response.status_code in (200, 201), f"PUT {name}: {response.status_code} {response.text}"


def create_jobs(client: httpx.Client, jobs: list[dict[str, Any]]) -> None:
    response = client.post("/v1/jobs:batch", json={"jobs": jobs})
    assert response.status_code == 200, f"batch: {response.status_code} {response.text[:300]}"
    statuses = [r["status"] for r in response.json()["results"]]
    assert statuses == [201] * len(jobs), f"expected {len(jobs)} times 201, got {set(statuses)}"


def confirm(page: Page, message: str) -> None:
    expect(page.get_by_test_id("confirm-message")).to_contain_text(message)
    page.get_by_test_id("confirm").click()
    expect(page.get_by_test_id("confirm-dialog")).not_to_be_visible()


def stat(page: Page, field: str) -> Any:
    return page.get_by_test_id("biz-stats").locator(f'[data-field="{field}"]')


def overview_cell(page: Page, biz: str, field: str) -> Any:
    return page.locator(f'[data-testid="biz-row"][data-biz-type="{biz}"] [data-field="{field}"]')


def audit_rows(page: Page, biz: str, action: str) -> Any:
    page.goto("/ui/#/audit")
    page.get_by_test_id("audit-biz").select_option(biz)
    page.get_by_test_id("audit-action").select_option(action)
    return page.locator(f'[data-testid="audit-row"][data-biz-type="{biz}"][data-action="{action}"]')


def delivered(client: httpx.Client, path: str, timeout_s: float) -> dict[str, Any]:
    """The job once its outcome is stored (the receiver hears the callback just before)."""
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = client.get(path).json()
        if job["state"] == "delivered" or time.monotonic() > deadline:
            assert job["state"] == "delivered", f"expected delivered within {timeout_s} s: {job}"
            return job
        time.sleep(0.05)


# -- tests ------------------------------------------------------------------------------


def test_token_is_asked_once_and_kept_for_the_tab(browser: Browser, stack: Stack) -> None:
    context = browser.new_context(base_url=stack.api_url)
    try:
        page = context.new_page()
        page.goto("/ui/")
        expect(page.get_by_test_id("token-dialog")).to_be_visible()
        page.get_by_test_id("token-input").fill("wrong")
        page.get_by_test_id("token-ok").click()
        expect(page.get_by_test_id("token-dialog")).to_be_visible()  # 401 again: asked again
        page.get_by_test_id("token-input").fill(TOKEN)
        page.get_by_test_id("token-ok").click()
        expect(page.get_by_test_id("updated-at")).to_contain_text("updated")
        page.goto("/ui/#/audit")
        expect(page.get_by_test_id("audit")).to_be_visible()
        expect(page.get_by_test_id("token-dialog")).not_to_be_visible()
        kept = page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})")
        assert kept == TOKEN, f"expected the token kept for the tab, got {kept!r}"
    finally:
        context.close()


def test_register_a_biz_type_and_watch_its_jobs_fire(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    page.goto("/ui/#/new")
    page.get_by_test_id("cfg-biz_type").fill("console-orders")
    page.get_by_test_id("cfg-callback_url").fill(receiver.url)
    page.get_by_test_id("cfg-rate_limit_per_s").fill("200")
    page.get_by_test_id("save-config").click()
    confirm(page, "creates the biz type")
    expect(page.get_by_test_id("biz-title")).to_have_text("console-orders")
    expect(page.get_by_test_id("paused-badge")).to_have_text("running")
    stored = client.get("/v1/biz-types/console-orders").json()
    assert (stored["callback_url"], stored["rate_limit_per_s"]) == (receiver.url, 200.0), stored

    # Due in 6 s: pending while the overview's first poll (on opening it) reads them.
    jobs = [{"biz_type": "console-orders", "job_id": f"o-{i}", "delay_ms": 6000} for i in range(20)]
    create_jobs(client, jobs)
    page.goto("/ui/#/")
    expect(overview_cell(page, "console-orders", "pending")).to_have_text("20")
    expect(overview_cell(page, "console-orders", "delivered_last_minute")).to_have_text("20")
    expect(overview_cell(page, "console-orders", "pending")).to_have_text("0")
    assert receiver.jobs_answered(200) == {j["job_id"] for j in jobs}

    rows = audit_rows(page, "console-orders", "biz_type.put")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("console-orders")


def test_find_a_dead_job_by_label_then_bulk_replay_a_thousand(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-bulk"
    put_biz(client, biz, receiver)
    receiver.status = 400  # a permanent failure: each job is dead after one attempt
    batch = [
        {"biz_type": biz, "job_id": f"b-{i:04d}", "delay_ms": 0, "labels": {"batch": "b1"}}
        for i in range(BULK_JOBS)
    ]
    acme = {"biz_type": biz, "job_id": "acme-7", "delay_ms": 0, "labels": {"tenant": "acme"}}
    create_jobs(client, batch)
    create_jobs(client, [acme])
    receiver.wait_answered({j["job_id"] for j in [*batch, acme]}, 400, timeout_s=120)

    page.goto(f"/ui/#/biz/{biz}")
    expect(stat(page, "dead")).to_have_text("1,001")
    expect(page.get_by_test_id("dead-letters-page")).to_have_text("page 1, 50 rows")
    page.get_by_test_id("dead-letters-next").click()
    expect(page.get_by_test_id("dead-letters-page")).to_have_text("page 2, 50 rows")

    page.get_by_test_id("search-label").fill("tenant:acme")
    page.get_by_test_id("search-submit").click()
    found = page.get_by_test_id("search-results").get_by_test_id("job-row")
    expect(found).to_have_count(1)
    expect(found).to_have_attribute("data-job-id", "acme-7")
    found.get_by_test_id("toggle-history").click()
    expect(found.get_by_test_id("history")).to_contain_text("HTTP 400")
    screenshot(page, "biz-type")

    receiver.status = 200
    page.get_by_test_id("search-label").fill("batch:b1")
    page.get_by_test_id("search-state").select_option("dead")
    page.get_by_test_id("search-submit").click()
    page.get_by_test_id("bulk-replay").click()
    confirm(page, "1,000 jobs would be replayed")
    status = page.get_by_test_id("bulk-status")
    expect(status).to_contain_text("replay done: 1,000 replayed", timeout=120_000)
    # The results refreshed: no dead job of the batch is left.
    expect(page.get_by_test_id("search-results-empty")).to_be_visible()
    letters = page.get_by_test_id("dead-letters").get_by_test_id("job-row")
    expect(letters).to_have_count(1)  # the dead letters refreshed too: acme-7 is left
    screenshot(page, "bulk-replay", scroll_to=page.get_by_test_id("search-section"))
    receiver.wait_answered({j["job_id"] for j in batch}, 200, timeout_s=180)
    expect(stat(page, "dead")).to_have_text("1")
    expect(stat(page, "delivered")).to_have_text("1,000")
    assert "acme-7" not in receiver.jobs_answered(200), "replayed a job outside the filter"
    assert receiver.bodies["acme-7"]["labels"] == {"tenant": "acme"}, receiver.bodies["acme-7"]
    page.goto("/ui/#/")
    expect(overview_cell(page, biz, "dead")).to_have_text("1")
    expect(page.get_by_test_id("overview-canary")).to_be_visible()
    screenshot(page, "overview")

    rows = audit_rows(page, biz, "jobs.bulk_replay")
    expect(rows.first).to_be_visible()
    cells = rows.locator('[data-field="count"]').all_inner_texts()
    counts = [int(c.replace(",", "")) for c in cells]
    assert sum(counts) == BULK_JOBS, f"expected audit counts summing to {BULK_JOBS}, got {counts}"
    screenshot(page, "audit")


def test_pause_and_resume_a_biz_type(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    """A signed, rate-limited biz type pauses and resumes without its secret being asked
    for (a PATCH), keeps its secret and limits, and its callbacks stay signed."""
    biz = "console-pausing"
    limits = {"rate_limit_per_s": 7.0, "burst": 2, "max_concurrency": 3}
    put_biz(client, biz, receiver, signing_secret=SECRET, **limits)
    page.goto(f"/ui/#/biz/{biz}")
    page.get_by_test_id("pause-toggle").click()
    confirm(page, f"PATCH /v1/biz-types/{biz}")
    expect(page.get_by_test_id("paused-badge")).to_have_text("paused")
    paused = client.get(f"/v1/biz-types/{biz}").json()
    assert (paused["paused"], paused["has_signing_secret"]) == (True, True), paused
    # Due 3 s after the pause: a pause reaches the notifiers within about a second
    # (docs/api.md), so a job due at once could still go out.
    create_jobs(client, [{"biz_type": biz, "job_id": "held", "delay_ms": 3000}])
    due_at = client.get(f"/v1/jobs/{biz}/held").json()["due_at"]
    # Held: pending, or dispatched and held by the notifier; still so past its due time.
    # Locators, not wait_for_function: the console's CSP refuses the eval that needs.
    held_cells = page.locator(
        "[data-testid=biz-stats] [data-field=pending],"
        " [data-testid=biz-stats] [data-field=dispatched]"
    )
    expect(held_cells.filter(has_text=re.compile(r"^1$"))).to_have_count(1)
    time.sleep(max(0.0, (due_at + 1500 - now_ms()) / 1000))
    held = client.get(f"/v1/jobs/{biz}/held").json()
    assert held["state"] in ("pending", "dispatched"), f"expected held while paused, got {held}"
    expect(stat(page, "delivered")).to_have_text("0")

    page.get_by_test_id("pause-toggle").click()
    confirm(page, f"PATCH /v1/biz-types/{biz}")
    expect(page.get_by_test_id("paused-badge")).to_have_text("running")
    expect(stat(page, "delivered")).to_have_text("1")
    assert receiver.jobs_answered(200) == {"held"}
    resumed = client.get(f"/v1/biz-types/{biz}").json()
    assert resumed["has_signing_secret"] is True, resumed
    assert {k: resumed[k] for k in limits} == limits, resumed
    raw, headers = receiver.raw["held"]
    verify_callback(raw, headers, SECRET)  # raises InvalidSignature when unsigned

    expect(audit_rows(page, biz, "biz_type.put")).to_have_count(1)  # created (API)
    expect(audit_rows(page, biz, "biz_type.patch")).to_have_count(2)  # paused, resumed


def test_saving_a_signed_config_keeps_its_secret(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-signed-save"
    put_biz(client, biz, receiver, signing_secret=SECRET, registration_rate_per_s=50.0)
    page.goto(f"/ui/#/biz/{biz}")
    page.get_by_test_id("config-panel").locator("summary").click()
    page.get_by_test_id("cfg-burst").fill("4")
    page.get_by_test_id("save-config").click()
    expect(page.get_by_test_id("config-diff")).to_have_text("burst: 1 → 4")
    confirm(page, f"PATCH /v1/biz-types/{biz}")

    # The dialog closes before the page sends its PATCH: wait for the write, not the close.
    deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
    stored = client.get(f"/v1/biz-types/{biz}").json()
    while stored["burst"] != 4 and time.monotonic() < deadline:
        time.sleep(0.1)
        stored = client.get(f"/v1/biz-types/{biz}").json()
    assert (stored["burst"], stored["has_signing_secret"]) == (4, True), stored
    assert stored["registration_rate_per_s"] == 50.0, "a field the form lacks must stay"


def test_job_lookup_shows_history_and_replays_and_cancels(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-single"
    put_biz(client, biz, receiver)
    receiver.status = 503
    create_jobs(
        client,
        [
            {"biz_type": biz, "job_id": "dies", "delay_ms": 0},
            {"biz_type": biz, "job_id": "later", "delay_ms": 3_600_000},
        ],
    )
    receiver.wait_answered({"dies"}, 503, timeout_s=30)
    page.goto("/ui/#/job")
    page.get_by_test_id("lookup-biz").select_option(biz)
    page.get_by_test_id("lookup-id").fill("dies")
    page.get_by_test_id("lookup-submit").click()
    expect(page.get_by_test_id("job-state")).to_have_text("dead")
    expect(page.get_by_test_id("history")).to_contain_text("HTTP 503")
    screenshot(page, "job")

    receiver.status = 200
    page.get_by_test_id("job-replay").click()
    confirm(page, "/replay")
    expect(page.get_by_test_id("job-state")).not_to_have_text("dead")
    receiver.wait_answered({"dies"}, 200, timeout_s=30)

    page.goto(f"/ui/#/job/{biz}/later")
    expect(page.get_by_test_id("job-state")).to_have_text("pending")
    page.get_by_test_id("job-cancel").click()
    confirm(page, f"DELETE /v1/jobs/{biz}/later")
    expect(page.get_by_test_id("job-state")).to_have_text("cancelled")

    for action, job_id in (("job.replay", "dies"), ("job.cancel", "later")):
        rows = audit_rows(page, biz, action)
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text(job_id)


def test_a_late_job_says_why_then_where_its_lateness_arose(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    """A job due now of a paused biz type says "paused" on GET and on its page; resumed
    more than a second later, it is delivered late and says so: held in the broker."""
    biz = "console-why-late"
    put_biz(client, biz, receiver, paused=True)
    create_jobs(client, [{"biz_type": biz, "job_id": "late", "delay_ms": 0}])
    job = client.get(f"/v1/jobs/{biz}/late").json()
    assert job["lateness"] is not None, f"a job past its moment must say why: {job}"
    assert job["lateness"]["waiting_for"] == "paused", job["lateness"]
    page.goto(f"/ui/#/job/{biz}/late")
    line = page.get_by_test_id("job-why-late")
    expect(line).to_contain_text(f"paused: biz type {biz} is paused")
    screenshot(page, "why-late")

    time.sleep(max(0.0, (job["created_at"] + 1500 - now_ms()) / 1000))  # CSP: no eval
    resumed = client.patch(f"/v1/biz-types/{biz}", json={"paused": False})
    assert resumed.status_code == 200, resumed.text
    receiver.wait_answered({"late"}, 200, timeout_s=30)
    final = delivered(client, f"/v1/jobs/{biz}/late", timeout_s=30)
    lateness = final["lateness"]
    assert lateness is not None and lateness["kind"] == "final", lateness
    assert lateness["hold_ms"] is not None and lateness["hold_ms"] > 1000, lateness
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text("delivered")
    expect(line).to_contain_text("hold ")


def test_schedules_show_their_next_run(page: Page, client: httpx.Client) -> None:
    client.put("/v1/biz-types/console-sched", json={"callback_url": "http://127.0.0.1:9/cb"})
    response = client.put(
        "/v1/schedules/console-sched/hourly", json={"intervals_ms": [3_600_000], "payload": 1}
    )
    assert response.status_code == 201, response.text
    page.goto("/ui/#/schedules")
    row = page.locator('[data-testid="schedule-row"][data-schedule-id="hourly"]')
    expect(row).to_contain_text("every 1 h")
    expect(row.locator('[data-field="next_run_at"]')).to_contain_text(re.compile(r"in (59|60) min"))
    screenshot(page, "schedules")


def test_api_errors_are_shown_and_change_nothing(page: Page, client: httpx.Client) -> None:
    biz = "console-errors"
    client.put(f"/v1/biz-types/{biz}", json={"callback_url": "http://127.0.0.1:9/cb"})
    create_jobs(client, [{"biz_type": biz, "job_id": "far", "delay_ms": 3_600_000}])
    page.goto(f"/ui/#/biz/{biz}")
    page.get_by_test_id("search-label").fill("no-colon-here")
    page.get_by_test_id("search-submit").click()
    expect(page.get_by_test_id("error")).to_contain_text("422")

    page.get_by_test_id("search-label").fill("")
    page.get_by_test_id("search-state").select_option("delivered")
    page.get_by_test_id("bulk-cancel").click()  # delivered jobs cannot be cancelled: 422
    expect(page.get_by_test_id("error")).to_contain_text("422")
    expect(page.get_by_test_id("confirm-dialog")).not_to_be_visible()
    assert client.get(f"/v1/jobs/{biz}/far").json()["state"] == "pending"
