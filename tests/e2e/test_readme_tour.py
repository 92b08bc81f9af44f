"""The README's five-minute tour, run as a newcomer runs it: every bash block of its
section in order, against a real `timer-service dev` and the demo receiver, with the
README's ports swapped for free ones, each block's output held to what the README says
it shows. A block added, dropped or moved fails here until CHECKS follows it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack, dev_stack
from tests.support import free_port, wait_port

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("\n## A five-minute tour\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", text[start:end], re.S)


def json_values(out: str) -> list[Any]:
    """curl -s prints each answer without a newline: read the JSON values one by one."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := _skip_space(out, at)) < len(out):
        value, at = decoder.raw_decode(out, at)
        values.append(value)
    return values


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def localise(block: str, api_port: int, ports: dict[str, int]) -> str:
    """The README's ports, as a newcomer's machine has them free, swapped for free ones."""
    return (
        block.replace("127.0.0.1:8080", f"127.0.0.1:{api_port}")
        .replace("127.0.0.1:9000", f"127.0.0.1:{ports['receiver']}")
        .replace("127.0.0.1:9001", f"127.0.0.1:{ports['closed']}")
        .replace("demo_receiver 9000", f"demo_receiver {ports['receiver']}")
        .replace(".venv/bin/python", sys.executable)
    )


class Tour:
    def __init__(self, stack: Stack, ports: dict[str, int], receiver_log: Path):
        self.stack, self.ports, self.receiver_log = stack, ports, receiver_log

    def run(self, block: str) -> str:
        done = subprocess.run(
            [
                "bash",
                "-e",
                "-o",
                "pipefail",
                "-c",
                localise(block, self.stack.api_port, self.ports),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"block failed ({done.returncode}):\n{block}\n{done.stderr}"
        return done.stdout

    def wait_printed(self, starts: set[str], timeout_s: float = 20) -> None:
        """Wait until the receiver printed a line starting with each of `starts`."""
        deadline = time.monotonic() + timeout_s
        while True:
            printed = self.receiver_log.read_text().splitlines()
            missing = {s for s in starts if not any(line.startswith(s) for line in printed)}
            if not missing:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the receiver never printed {sorted(missing)}; it printed:\n"
                    + "\n".join(printed)
                )
            time.sleep(0.1)

    def wait_delivered(self, biz_type: str, job_ids: list[str], timeout_s: float = 10) -> None:
        """A reader's pause: the receiver prints a callback as it answers, and the notifier
        records the outcome a few milliseconds later (docs/architecture.md)."""
        deadline = time.monotonic() + timeout_s
        for job_id in job_ids:
            url = f"{self.stack.api_url}/v1/jobs/{biz_type}/{job_id}"
            while (state := httpx.get(url, timeout=5).json()["state"]) != "delivered":
                assert time.monotonic() < deadline, f"{biz_type}/{job_id} still {state}"
                time.sleep(0.05)


def check_receiver(tour: Tour, out: str) -> None:
    tour.wait_printed({"receiving callbacks on"})


def check_biz_type(tour: Tour, out: str) -> None:
    (config,) = json_values(out)
    assert config["biz_type"] == "demo" and config["rate_limit_per_s"] == 100, config


def check_jobs(tour: Tour, out: str) -> None:
    created, to_cancel, cancelled = json_values(out)
    assert (created["job_id"], created["state"]) == ("order-42", "pending"), created
    assert (to_cancel["job_id"], to_cancel["state"]) == ("order-43", "pending"), to_cancel
    assert (cancelled["job_id"], cancelled["state"]) == ("order-43", "cancelled"), cancelled
    tour.wait_printed({"callback demo/order-42 attempt 1 "})
    tour.wait_delivered("demo", ["order-42"])


def check_job_and_metrics(tour: Tour, out: str) -> None:
    job, end = json.JSONDecoder().raw_decode(out)
    metrics = out[end:]
    assert job["state"] == "delivered" and len(job["history"]) == 1, job
    assert 'timer_callbacks_total{biz_type="demo",outcome="delivered"} 1.0' in metrics, metrics
    assert 'timer_delivery_lateness_seconds_count{biz_type="demo"} 1.0' in metrics, metrics


def check_dead_jobs(tour: Tour, out: str) -> None:
    *answers, listing = json_values(out)
    assert [a.get("job_id") for a in answers[1:]] == ["cart-1", "cart-2", "cart-3"], answers
    dead = {job["job_id"]: job for job in listing["items"]}
    assert sorted(dead) == ["cart-1", "cart-2", "cart-3"], listing
    assert all(job["state"] == "dead" and job["last_error"] for job in dead.values()), dead


def check_bulk_replay(tour: Tour, out: str) -> None:
    patched, dry_run, *pages = json_values(out)
    assert patched["callback_url"].endswith(f":{tour.ports['receiver']}/callback"), patched
    assert patched["retry"]["max_attempts"] == 1, patched  # the patch kept the rest
    assert (dry_run["matched"], dry_run["changed"]) == (3, 0), dry_run
    assert sum(p["changed"] for p in pages) == 3 and pages[-1]["next_cursor"] is None, pages
    tour.wait_printed({f"callback shop/cart-{n} attempt 2 " for n in (1, 2, 3)})
    tour.wait_delivered("shop", ["cart-1", "cart-2", "cart-3"])


def check_audit_and_stats(tour: Tour, out: str) -> None:
    audit, stats = json_values(out)
    newest = audit["items"][0]
    assert (newest["action"], newest["count"]) == ("jobs.bulk_replay", 3), newest
    shop = next(s for s in stats["items"] if s["biz_type"] == "shop")
    assert shop["counts"]["delivered"] == 3 and shop["counts"]["dead"] == 0, shop


CHECKS: list[Callable[[Tour, str], None]] = [
    check_receiver,
    check_biz_type,
    check_jobs,
    check_job_and_metrics,
    check_dead_jobs,
    check_bulk_replay,
    check_audit_and_stats,
]


@pytest.fixture
def tour() -> Iterator[Tour]:
    data_dir = Path(tempfile.mkdtemp(prefix="timer-tour-"))
    stack = dev_stack(str(data_dir))
    ports = {"receiver": free_port(), "closed": free_port()}
    receiver_log = data_dir / "receiver.log"
    stack.start()
    receiver: subprocess.Popen[bytes] | None = None
    try:
        with receiver_log.open("wb") as out:  # the first block: the receiver, left running
            command = "exec " + localise(tour_blocks()[0], stack.api_port, ports)
            receiver = subprocess.Popen(["bash", "-c", command], stdout=out, stderr=out)
        wait_port(ports["receiver"], 30)
        yield Tour(stack, ports, receiver_log)
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait(10)
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_the_readme_tour_shows_what_it_says(tour: Tour) -> None:
    blocks = tour_blocks()
    assert len(blocks) == len(CHECKS), (
        f"the README's tour has {len(blocks)} bash blocks, this test checks {len(CHECKS)}"
    )
    CHECKS[0](tour, "")  # the receiver, started by the fixture as the first block
    for index, (block, check) in enumerate(zip(blocks[1:], CHECKS[1:], strict=True), 1):
        out = tour.run(block)
        print(f"[tour] block {index} ({check.__name__}): {len(out)} bytes", flush=True)
        check(tour, out)
