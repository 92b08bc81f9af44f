"""The console's views of time in headless Chromium against a real `timer-service dev`
(fixtures of test_console.py): the servers view (daemons, brokers, the canary), a biz
type's per-minute charts, the load calendar, and a schedule's "run now", "skip next" and
edit.
`CONSOLE_SCREENSHOTS=1` also writes docs/console/*.png."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e import test_console as shared
from tests.e2e.console_support import SwitchableReceiver, screenshot
from tests.e2e.test_console import audit_rows, confirm, create_jobs, put_biz

pytestmark = pytest.mark.e2e

# The fixtures of test_console.py, for a stack and a browser of this module's own.
stack, client, browser, page, receiver = (
    shared.stack,
    shared.client,
    shared.browser,
    shared.page,
    shared.receiver,
)


def test_servers_show_the_daemon_the_broker_and_a_live_canary(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    put_biz(client, "console-servers", receiver)
    page.goto("/ui/#/servers")
    expect(page.get_by_test_id("canary")).to_have_attribute("data-state", "alive")
    expect(page.get_by_test_id("canary")).to_contain_text("last canary")
    expect(page.get_by_test_id("daemon-row")).not_to_have_count(0)
    expect(page.get_by_test_id("daemon-row").first).to_contain_text("held")
    expect(page.get_by_test_id("unowned")).to_have_count(0)
    broker = page.get_by_test_id("broker-row").first
    expect(broker).to_contain_text("live")
    expect(broker).to_contain_text("console-servers")  # its consuming set follows new biz types
    expect(broker).not_to_contain_text("_canary")
    screenshot(page, "servers")


def test_the_overview_says_whether_firing_is_alive(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    put_biz(client, "console-alive", receiver)
    page.goto("/ui/#/")
    line = page.get_by_test_id("overview-canary")
    expect(line.get_by_test_id("canary")).to_have_attribute("data-state", "alive")
    expect(line).to_contain_text("Firing is alive")
    expect(line).to_contain_text("last canary")
    expect(page.locator('[data-testid="biz-row"][data-biz-type="console-alive"]')).to_be_visible()
    line.click()
    expect(page).to_have_url(re.compile(r"#/servers$"))
    expect(page.get_by_test_id("daemon-row")).not_to_have_count(0)


def test_a_biz_types_last_hour_is_charted(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-charts"
    put_biz(client, biz, receiver)
    ok = [{"biz_type": biz, "job_id": f"ok-{i}", "delay_ms": 0} for i in range(40)]
    create_jobs(client, ok)
    receiver.wait_answered({j["job_id"] for j in ok}, 200, timeout_s=60)
    receiver.status = 500
    failing = [{"biz_type": biz, "job_id": f"bad-{i}", "delay_ms": 0} for i in range(6)]
    create_jobs(client, failing)
    receiver.wait_answered({j["job_id"] for j in failing}, 500, timeout_s=60)

    page.goto(f"/ui/#/biz/{biz}")
    outcomes = page.get_by_test_id("chart-outcomes")
    expect(outcomes.locator("rect.s-good")).not_to_have_count(0)
    expect(outcomes.locator("rect.s-bad")).not_to_have_count(0)
    lateness = page.get_by_test_id("chart-lateness")
    expect(lateness.locator("path.s-warn")).to_have_count(1)
    expect(lateness.locator("circle")).not_to_have_count(0)
    series = client.get(f"/v1/biz-types/{biz}/series").json()
    points = series["points"]
    assert len(points) == 60, series
    assert sum(p["delivered"] for p in points) == 40, points[-3:]
    assert sum(p["failed"] for p in points) == 6, points[-3:]
    screenshot(page, "charts", scroll_to=page.get_by_test_id("biz-stats"))


def test_the_calendar_shows_how_much_fires_in_the_next_hour_and_its_peak(
    page: Page, client: httpx.Client, receiver: SwitchableReceiver
) -> None:
    biz = "console-calendar"
    put_biz(client, biz, receiver)
    minute = int(time.time() * 1000) // 60_000 * 60_000
    peak, later = minute + 20 * 60_000, minute + 40 * 60_000
    jobs = [{"biz_type": biz, "job_id": f"peak-{i}", "due_at": peak + 30_000} for i in range(30)]
    jobs += [{"biz_type": biz, "job_id": f"later-{i}", "due_at": later + 5_000} for i in range(5)]
    create_jobs(client, jobs)

    page.goto(f"/ui/#/biz/{biz}")
    summary = page.get_by_test_id("calendar-summary")
    expect(summary).to_have_attribute("data-total", "35")
    expect(summary).to_have_attribute("data-peak-at", str(peak))
    expect(summary).to_contain_text("35 due in the next hour")
    bars = page.get_by_test_id("chart-calendar").locator("rect.s-accent")
    expect(bars).to_have_count(2)
    screenshot(page, "calendar", scroll_to=page.get_by_test_id("calendar-panel"))

    page.get_by_test_id("calendar-range-1d").click()
    expect(page.get_by_test_id("chart-calendar")).to_have_attribute("data-range", "1d")
    expect(summary).to_have_attribute("data-total", "35")
    page.get_by_test_id("calendar-range-10m").click()
    expect(page.get_by_test_id("chart-calendar")).to_have_attribute("data-range", "10m")
    expect(summary).to_have_attribute("data-total", "0")
    expect(summary).to_contain_text("Nothing due in the next 10 min")

    page.goto("/ui/#/")  # the overview's calendar counts every biz type
    expect(page.get_by_test_id("calendar-panel")).to_contain_text("every biz type")
    total = page.get_by_test_id("calendar-summary")
    expect(total).to_have_attribute("data-total", re.compile(r"^\d+$"))
    assert int(total.get_attribute("data-total") or 0) >= 35


def test_run_now_skip_next_and_edit_a_schedule(page: Page, client: httpx.Client) -> None:
    biz = "console-sched-edit"
    client.put(f"/v1/biz-types/{biz}", json={"callback_url": "http://127.0.0.1:9/cb"})
    body = {"intervals_ms": [3_600_000], "cycle": True, "payload": {"report": "daily"}}
    assert client.put(f"/v1/schedules/{biz}/hourly", json=body).status_code == 201
    before = client.get(f"/v1/schedules/{biz}/hourly").json()
    page.goto("/ui/#/schedules")
    page.get_by_test_id("schedules-biz").select_option(biz)
    row = page.locator('[data-testid="schedule-row"][data-schedule-id="hourly"]')

    row.get_by_test_id("run-now").click()
    confirm(page, "One extra job due now")
    expect(page.get_by_test_id("ran-job")).to_contain_text("hourly:")
    ran = page.get_by_test_id("ran-job").inner_text()
    job = client.get(f"/v1/jobs/{biz}/{ran}").json()
    assert job["payload"] == {"report": "daily"}, job
    assert client.get(f"/v1/schedules/{biz}/hourly").json()["next_run_at"] == before["next_run_at"]

    row.get_by_test_id("skip-next").click()
    confirm(page, "is cancelled")
    expect(page.get_by_test_id("schedule-note")).to_contain_text("Skipped")
    after = client.get(f"/v1/schedules/{biz}/hourly").json()
    assert after["next_run_at"] == before["next_run_at"] + 3_600_000, after
    skipped = client.get(f"/v1/jobs/{biz}/hourly:{before['next_run_at']}").json()
    assert skipped["state"] == "cancelled", skipped
    expect(row.locator('[data-field="next_run_at"]')).to_contain_text(re.compile(r"in (1|2) h"))
    screenshot(page, "schedule-actions")

    row.get_by_test_id("edit-schedule").click()
    page.get_by_test_id("schedule-intervals").fill("1800000")
    page.get_by_test_id("schedule-paused").check()
    screenshot(page, "schedule-edit")
    confirm(page, "PUT /v1/schedules")
    expect(row).to_contain_text("every 30 min")
    expect(row).to_contain_text("paused")
    stored = client.get(f"/v1/schedules/{biz}/hourly").json()
    assert (stored["intervals_ms"], stored["paused"]) == ([1_800_000], True), stored
    assert stored["payload"] == {"report": "daily"}, "the payload stays as it was"

    for action in ("schedule.run_now", "schedule.skip_next", "schedule.put"):
        expect(audit_rows(page, biz, action)).not_to_have_count(0)
