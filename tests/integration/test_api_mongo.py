"""`timer-service api` as a user runs it: the console script over SecantusDB, through HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faultproxy import FaultProxy
from tests.support import VENV_BIN, SecantusServer, free_port, unique_name, wait_port

pytestmark = pytest.mark.integration

JSON_TYPE = {"content-type": "application/json"}


class ApiProcess:
    def __init__(self, mongo_url: str, **env: str) -> None:
        self.port = free_port()
        self.db = unique_name("apidb")
        self.log_path = Path(f"/tmp/{self.db}.log")
        self.env = {
            **os.environ,
            "TIMER_MONGO_URL": mongo_url,
            "TIMER_MONGO_DB": self.db,
            "TIMER_HTTP_PORT": str(self.port),
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "timer-service"), "api"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/tmp",
            )
        try:
            wait_port(self.port, 60)
        except TimeoutError:
            self.stop()
            raise AssertionError(f"api did not start:\n{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"api did not stop on signal {sig}:\n{self.log()}") from None


@pytest.fixture
def api_process(secantus: SecantusServer) -> Iterator[ApiProcess]:
    process = ApiProcess(secantus.url)
    process.start()
    yield process
    if process.proc is not None and process.proc.poll() is None:
        process.stop()
    process.log_path.unlink(missing_ok=True)


def check(response: httpx.Response, status: int) -> Any:
    assert response.status_code == status, (
        f"{response.request.method} {response.request.url}: expected {status}, "
        f"got {response.status_code}: {response.text[:500]}"
    )
    if status >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
    return response.json() if response.content else None


async def test_every_endpoint_over_mongo(api_process: ApiProcess) -> None:
    async with httpx.AsyncClient(base_url=api_process.url, timeout=30) as c:
        check(await c.get("/healthz"), 200)
        check(await c.get("/readyz"), 200)

        biz = {"callback_url": "http://127.0.0.1:1/cb", "signing_secret": "s", "burst": 5}
        created = check(await c.put("/v1/biz-types/orders", json=biz), 201)
        assert created["has_signing_secret"] is True and "signing_secret" not in created
        check(await c.put("/v1/biz-types/orders", json={**biz, "paused": True}), 200)
        assert check(await c.get("/v1/biz-types/orders"), 200)["paused"] is True
        listed = check(await c.get("/v1/biz-types"), 200)
        assert [b["biz_type"] for b in listed["items"]] == ["orders"], listed
        check(await c.get("/v1/biz-types/nope"), 404)

        now_ms = int(time.time() * 1000)
        body = {
            "biz_type": "orders",
            "job_id": "o-1",
            "due_at": now_ms + 3_600_000,
            "payload": {"order": 1},
        }
        response = await c.post("/v1/jobs", json=body)
        job = check(response, 201)
        assert response.headers["location"] == "/v1/jobs/orders/o-1"
        assert job["state"] == "pending" and job["payload"] == {"order": 1}, job
        assert check(await c.post("/v1/jobs", json=body), 200) == job
        check(await c.post("/v1/jobs", json={**body, "payload": 2}), 409)
        check(await c.post("/v1/jobs", json={"biz_type": "nope", "delay_ms": 1}), 422)
        check(await c.post("/v1/jobs", content=b"{nope", headers=JSON_TYPE), 400)
        check(await c.post("/v1/jobs", content=b"{}", headers={"content-type": "text/plain"}), 415)
        got = check(await c.get("/v1/jobs/orders/o-1"), 200)
        assert got.pop("lateness") is None and got == job, got  # GET alone says why late

        results = check(
            await c.post(
                "/v1/jobs:batch",
                json={
                    "jobs": [
                        {"biz_type": "orders", "job_id": "o-2", "delay_ms": 60_000},
                        {
                            "biz_type": "orders",
                            "job_id": "o-1",
                            "due_at": body["due_at"],
                            "payload": {"order": 1},
                        },
                        {"biz_type": "orders", "job_id": "o-2", "delay_ms": 60_000, "payload": "x"},
                        {"biz_type": "orders", "job_id": "bad id", "delay_ms": 1},
                    ]
                },
            ),
            200,
        )["results"]
        assert [r["status"] for r in results] == [201, 200, 409, 422], results

        moved = check(await c.patch("/v1/jobs/orders/o-2", json={"delay_ms": 120_000}), 200)
        assert moved["due_at"] > now_ms + 100_000, moved
        cancelled = check(await c.delete("/v1/jobs/orders/o-2"), 200)
        assert cancelled["state"] == "cancelled" and cancelled["next_attempt_at"] is None
        check(await c.patch("/v1/jobs/orders/o-2", json={"delay_ms": 1}), 409)
        check(await c.post("/v1/jobs/orders/o-2/replay"), 409)
        check(await c.post("/v1/jobs/orders/none/replay"), 404)
        check(await c.delete("/v1/jobs/orders/none"), 404)

        page = check(await c.get("/v1/jobs", params={"biz_type": "orders", "limit": 1}), 200)
        assert len(page["items"]) == 1 and page["next_cursor"], page
        rest = check(
            await c.get("/v1/jobs", params={"biz_type": "orders", "cursor": page["next_cursor"]}),
            200,
        )
        ids = [j["job_id"] for j in page["items"] + rest["items"]]
        assert ids == ["o-1", "o-2"], ids
        only = check(await c.get("/v1/jobs", params={"state": "cancelled"}), 200)
        assert [j["job_id"] for j in only["items"]] == ["o-2"], only
        check(await c.get("/v1/jobs", params={"limit": 1001}), 422)

        check(await c.delete("/v1/biz-types/orders"), 409)  # o-1 is pending
        check(await c.delete("/v1/jobs/orders/o-1"), 200)
        assert (await c.delete("/v1/biz-types/orders")).status_code == 204
        check(await c.get("/v1/biz-types/orders"), 404)

        metrics = await c.get("/metrics")
        assert 'timer_jobs_created_total{biz_type="orders"} 2.0' in metrics.text, metrics.text
        check(await c.get("/openapi.json"), 200)
    assert api_process.stop() == 0, api_process.log()


async def test_concurrent_creates_of_one_identity_leave_one_job(api_process: ApiProcess) -> None:
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=api_process.url, timeout=60, limits=limits) as c:
        check(await c.put("/v1/biz-types/race", json={"callback_url": "http://x/"}), 201)
        body = {"biz_type": "race", "job_id": "same", "delay_ms": 3_600_000, "payload": [1]}
        responses = await asyncio.gather(*(c.post("/v1/jobs", json=body) for _ in range(50)))
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * 49 + [201], statuses
        # The answers describe the one job. (created_at is left out: a creator that finds
        # the identity taken before the first creator wrote the job answers with its own
        # reconstruction of it - see the report to the store's author.)
        seen = {
            (r.json()["job_id"], r.json()["due_at"], str(r.json()["payload"])) for r in responses
        }
        assert len(seen) == 1, f"answers describe different jobs: {seen}"
        page = check(await c.get("/v1/jobs", params={"biz_type": "race"}), 200)
        assert [j["job_id"] for j in page["items"]] == ["same"], page
        stored = page["items"][0]
        assert (stored["due_at"], stored["payload"]) == (responses[0].json()["due_at"], [1])


async def test_token_is_required_when_set(secantus: SecantusServer) -> None:
    process = ApiProcess(secantus.url, TIMER_API_TOKEN="sekrit")
    process.start()
    try:
        async with httpx.AsyncClient(base_url=process.url, timeout=30) as c:
            response = await c.get("/v1/biz-types")
            check(response, 401)
            assert response.headers["www-authenticate"].startswith("Bearer")
            auth = {"Authorization": "Bearer sekrit"}
            check(await c.get("/v1/biz-types", headers=auth), 200)
            check(await c.get("/healthz"), 200)
    finally:
        assert process.stop() == 0, process.log()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_exit_0(api_process: ApiProcess, sig: int) -> None:
    with httpx.Client(base_url=api_process.url, timeout=30) as c:
        check(c.get("/readyz"), 200)
    code = api_process.stop(sig)
    assert code == 0, f"expected exit 0 on {signal.Signals(sig).name}, got {code}:\n" + (
        api_process.log()
    )


async def test_a_store_that_stops_answering_is_503_then_recovers(secantus: SecantusServer) -> None:
    """The real process over a store that refuses connections (a TCP fault proxy)."""
    with FaultProxy.from_url(secantus.url) as proxy:
        process = ApiProcess(proxy.url_for(secantus.url))
        process.start()
        try:
            async with httpx.AsyncClient(base_url=process.url, timeout=30) as client:
                put = await client.put(
                    "/v1/biz-types/orders", json={"callback_url": "http://127.0.0.1:9/cb"}
                )
                assert put.status_code == 201, put.text
                proxy.set_mode("refuse")
                proxy.reset_all()
                started = time.monotonic()
                got = await client.get("/v1/jobs/orders/a")
                took_s = time.monotonic() - started
                assert got.status_code == 503, got.text
                assert got.headers.get("Retry-After"), got.headers
                assert "pymongo" not in got.text and "refused" not in got.text.lower(), got.text
                ready = await client.get("/readyz")
                assert ready.status_code == 503 and "pymongo" not in ready.text, ready.text
                proxy.set_mode("pass")
                for _ in range(100):
                    if (await client.get("/readyz")).status_code == 200:
                        break
                    await asyncio.sleep(0.2)
                created = await client.post(
                    "/v1/jobs", json={"biz_type": "orders", "job_id": "a", "delay_ms": 60_000}
                )
                assert created.status_code == 201, created.text
                assert took_s < 15, f"the 503 took {took_s:.1f} s"
        finally:
            process.stop()
            process.log_path.unlink(missing_ok=True)


async def test_console_endpoints_over_mongo(api_process: ApiProcess) -> None:
    """Labels, search, bulk cancel (dry run, then in pages), audit and stats through
    the real process on SecantusDB; bad input refused with nothing changed."""
    async with httpx.AsyncClient(base_url=api_process.url, timeout=60) as c:
        check(
            await c.put("/v1/biz-types/shop", json={"callback_url": "http://127.0.0.1:1/cb"}), 201
        )
        due = int(time.time() * 1000) + 3_600_000
        jobs = [
            {"biz_type": "shop", "job_id": f"o-{i:02d}", "due_at": due + i * 1000,
             "labels": {"tenant": f"t{i % 2}"}}
            for i in range(10)
        ]  # fmt: skip
        results = check(await c.post("/v1/jobs:batch", json={"jobs": jobs}), 200)["results"]
        assert {r["status"] for r in results} == {201}, results
        assert results[3]["job"]["labels"] == {"tenant": "t1"}

        page = check(await c.get("/v1/jobs?biz_type=shop&label=tenant:t1&limit=100"), 200)
        got = [j["job_id"] for j in page["items"]]
        assert got == [f"o-{i:02d}" for i in range(1, 10, 2)], got
        window = f"due_after={due + 2000}&due_before={due + 4000}"
        page = check(await c.get(f"/v1/jobs?biz_type=shop&state=pending&{window}"), 200)
        assert [j["job_id"] for j in page["items"]] == ["o-02", "o-03"], page
        check(await c.get("/v1/jobs?label=nocolon"), 422)

        where = {"biz_type": "shop", "labels": {"tenant": "t0"}}
        before = check(await c.get("/v1/jobs?biz_type=shop&limit=100"), 200)
        for bad, status in (({"filter": {}}, 422), ({"filter": {"biz_type": "nope"}}, 404),
                            ({"filter": {**where, "state": "dead"}}, 422)):  # fmt: skip
            check(await c.post("/v1/jobs:bulk-cancel", json=bad), status)
        assert check(await c.get("/v1/jobs?biz_type=shop&limit=100"), 200) == before
        dry = check(
            await c.post("/v1/jobs:bulk-cancel", json={"filter": where, "dry_run": True}), 200
        )
        assert dry["matched"] == 5 and dry["changed"] == 0, dry
        changed, cursor, ops = 0, None, set()
        while True:
            call: dict[str, Any] = {"filter": where, "limit": 2}
            if cursor:
                call["cursor"] = cursor
            answer = check(await c.post("/v1/jobs:bulk-cancel", json=call), 200)
            changed += answer["changed"]
            ops.add(answer["operation_id"])
            cursor = answer["next_cursor"]
            if cursor is None:
                break
        assert changed == 5 and len(ops) == 1, (changed, ops)
        left = check(await c.get("/v1/jobs?biz_type=shop&state=cancelled&limit=100"), 200)
        assert [j["job_id"] for j in left["items"]] == [f"o-{i:02d}" for i in range(0, 10, 2)]

        audit = check(await c.get("/v1/audit?biz_type=shop"), 200)["items"]
        assert [e["action"] for e in audit] == ["jobs.bulk_cancel"] * 3 + ["biz_type.put"]
        assert sum(e["count"] for e in audit[:3]) == 5 and audit[0]["actor"] == "anonymous"
        stats = check(await c.get("/v1/biz-types/shop/stats"), 200)
        assert stats["counts"] == {"pending": 5, "dispatched": 0, "delivered": 0, "dead": 0,
                                   "cancelled": 5}, stats  # fmt: skip
        every = check(await c.get("/v1/stats"), 200)
        assert [i["biz_type"] for i in every["items"]] == ["shop"], every
