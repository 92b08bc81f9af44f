"""What the console's browser tests need beside the page: Debian's chromium, a callback
receiver whose answer can be switched (failing, then succeeding), and screenshots."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = ROOT / "docs" / "console"
# `CONSOLE_SCREENSHOTS=1` makes the tests (and the benchmark) write docs/console/*.png.
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS") == "1"


def chromium_path() -> str:
    """Debian's chromium (apt-get install chromium; .ci/run installs it). Playwright
    drives it through `executable_path`: no browser download, ever."""
    for candidate in (os.environ.get("CHROMIUM_PATH"), "chromium", "chromium-browser"):
        if candidate and (found := shutil.which(candidate)):
            return found
    raise RuntimeError("no chromium: apt-get install -y chromium (or set CHROMIUM_PATH)")


# (callback body) -> (status, headers, body) of the answer
AnswerFor = Callable[[dict[str, Any]], tuple[int, dict[str, str], bytes]]


class SwitchableReceiver:
    """A callback endpoint in a thread: answers `status` (changeable at any time) and
    counts every callback by (job_id, status it answered)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.status = 200
        # An answer of its own per callback body; None: `status`, empty.
        self.answer_for: AnswerFor | None = None
        self.answered: Counter[tuple[str, int]] = Counter()
        self.bodies: dict[str, dict[str, Any]] = {}
        self.raw: dict[str, tuple[bytes, dict[str, str]]] = {}  # the last callback's bytes
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw)
                status, headers, answer = receiver.status, {}, b""
                if receiver.answer_for is not None:
                    status, headers, answer = receiver.answer_for(body)
                with receiver._lock:
                    receiver.answered[(body["job_id"], status)] += 1
                    receiver.bodies[body["job_id"]] = body
                    receiver.raw[body["job_id"]] = (raw, dict(self.headers.items()))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    def start(self) -> SwitchableReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def jobs_answered(self, status: int) -> set[str]:
        with self._lock:
            return {job for (job, answered), n in self.answered.items() if answered == status and n}

    def wait_answered(self, job_ids: set[str], status: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if job_ids <= self.jobs_answered(status):
                return
            time.sleep(0.1)
        missing = sorted(job_ids - self.jobs_answered(status))
        raise AssertionError(
            f"expected {len(job_ids)} callbacks answered {status}, "
            f"{len(missing)} missing, e.g. {missing[:5]}"
        )


def screenshot(page: Any, name: str, scroll_to: Any = None) -> None:
    """Writes docs/console/<name>.png (the viewport, `scroll_to` a locator brought into
    view first) when CONSOLE_SCREENSHOTS=1."""
    if not SCREENSHOTS:
        return
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    if scroll_to is None:
        page.evaluate("window.scrollTo(0, 0)")
    else:
        scroll_to.evaluate("node => node.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(SCREENSHOT_DIR / f"{name}.png"))
