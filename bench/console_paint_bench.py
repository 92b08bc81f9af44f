"""The operator console's first paint with 10,000 dead jobs on SecantusDB.

Starts `timer-service dev` on a SecantusDB server, fills one biz type with N dead jobs
the real way (created through the API, called back, answered 400 by a local receiver),
then opens the console in headless Chromium (Debian's, through Playwright) in a fresh
browser context per run (empty cache) and prints, over the runs, the time from
navigation start until
  - the overview shows that biz type's dead count (N), and
  - the biz type's page shows its first page of dead letters (50 rows),
with the API calls each paint waited for (the browser's resource timings).

    python bench/console_paint_bench.py --jobs 10000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import Page, sync_playwright

from tests.e2e.console_support import SwitchableReceiver, chromium_path
from tests.e2e.harness import Service
from tests.support import free_port, secantus_server

BIZ = "paint"
DEAD_LETTER_ROWS = 50  # the console's page size


def fill_dead_jobs(client: httpx.Client, receiver: SwitchableReceiver, jobs: int) -> None:
    receiver.status = 400  # permanent: dead after one attempt
    body = {"callback_url": receiver.url, "max_concurrency": 64}
    assert client.put(f"/v1/biz-types/{BIZ}", json=body).status_code == 201
    started = time.monotonic()
    for first in range(0, jobs, 1000):
        batch = [
            {"biz_type": BIZ, "job_id": f"dead-{k:06d}", "delay_ms": 0, "labels": {"run": "bench"}}
            for k in range(first, min(jobs, first + 1000))
        ]
        results = client.post("/v1/jobs:batch", json={"jobs": batch}).json()["results"]
        assert all(r["status"] == 201 for r in results), results[:3]
    created_s = time.monotonic() - started
    while True:
        counts = client.get(f"/v1/biz-types/{BIZ}/stats").json()["counts"]
        if counts["dead"] == jobs:
            break
        if time.monotonic() - started > 60 + jobs / 20:
            raise TimeoutError(f"only {counts} after {time.monotonic() - started:.0f} s")
        time.sleep(1)
    print(
        f"setup: {jobs:,} jobs created in {created_s:.1f} s, all dead after "
        f"{time.monotonic() - started:.1f} s (created, called back, answered 400)"
    )


def api_timings(page: Page) -> dict[str, float]:
    """Duration (ms) of each API call the page made, by path."""
    entries = page.evaluate(
        "performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('/v1/'))"
        ".map(e => [new URL(e.name).pathname, e.duration])"
    )
    return {path: duration for path, duration in entries}


def paint_ms(page: Page, url: str, rendered_js: str) -> tuple[float, dict[str, float]]:
    page.goto(url)
    page.wait_for_function(rendered_js, timeout=60_000)
    return float(page.evaluate("performance.now()")), api_timings(page)


def report(label: str, runs: list[tuple[float, dict[str, float]]]) -> None:
    times = [t for t, _ in runs]
    print(
        f"{label}: median {statistics.median(times):.0f} ms, min {min(times):.0f} ms, "
        f"max {max(times):.0f} ms over {len(times)} runs"
    )
    calls: dict[str, list[float]] = {}
    for _, timings in runs:
        for path, duration in timings.items():
            calls.setdefault(path, []).append(duration)
    for path, durations in sorted(calls.items()):
        print(f"    {path}: median {statistics.median(durations):.0f} ms")


def measure(base_url: str, jobs: int, runs: int) -> None:
    dead_text = f"{jobs:,}"
    overview_js = (
        f'document.querySelector(\'[data-biz-type="{BIZ}"] [data-field="dead"]\')'
        f"?.textContent === '{dead_text}'"
    )
    letters_js = (
        'document.querySelectorAll(\'[data-testid="dead-letters"] '
        f'[data-testid="job-row"]\').length === {DEAD_LETTER_ROWS}'
    )
    overview: list[Any] = []
    letters: list[Any] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True)
        for _ in range(runs):
            for results, url, js in (
                (overview, f"{base_url}/ui/#/", overview_js),
                (letters, f"{base_url}/ui/#/biz/{BIZ}", letters_js),
            ):
                context = browser.new_context(viewport={"width": 1360, "height": 900})
                results.append(paint_ms(context.new_page(), url, js))
                context.close()
        browser.close()
    print(f"console first paint, {jobs:,} dead jobs, SecantusDB, headless Chromium (fresh cache)")
    report("  overview (biz types with counts)", overview)
    report(f"  dead letters (first {DEAD_LETTER_ROWS} of {jobs:,})", letters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    receiver = SwitchableReceiver().start()
    with secantus_server() as server, tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        env = {
            "TIMER_MONGO_URL": server.url,
            "TIMER_MONGO_DB": f"paint{uuid.uuid4().hex[:8]}",
            "TIMER_HTTP_PORT": str(port),
            "TIMER_DATA_DIR": data_dir,
            "TIMER_LOG_LEVEL": "WARNING",
        }
        dev = Service("dev", env, port, name="paint-bench").start()
        try:
            base_url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base_url, timeout=120) as client:
                fill_dead_jobs(client, receiver, args.jobs)
            measure(base_url, args.jobs, args.runs)
        finally:
            dev.stop_quietly()
            receiver.stop()


if __name__ == "__main__":
    main()
