"""The SDK, the receiver dependency and the operator CLI against the live service (issue 7).

A business team's own FastAPI app receives the callbacks through `CallbackVerifier`; jobs go
in through `AsyncTimerClient` / `TimerClient`, and every `timer-service jobs|biz-types`
subcommand runs as a subprocess against the same service.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from standardwebhooks import Webhook

from tests.e2e.business_app import NEW_SECRET, OLD_SECRET, BusinessApp, business_app
from tests.e2e.conftest import Stack
from tests.e2e.harness import BIN, now_ms
from tests.support import Progress, unique_name
from timer_service.client import AsyncTimerClient, Job, JobSpec, TimerClient
from timer_service.signing import sign

pytestmark = pytest.mark.e2e
__all__ = ["business_app"]  # the fixture

BATCH_ITEMS = 1200


class CountingTransport(httpx.AsyncHTTPTransport):
    """Sees every request the SDK sends, to prove chunking and paging from the outside."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        return await super().handle_async_request(request)

    def count(self, method: str, path: str) -> int:
        return self.sent.count((method, path))


async def wait_state(
    timers: AsyncTimerClient, biz: str, job_id: str, state: str, timeout_s: float = 20
) -> Job:
    deadline = time.monotonic() + timeout_s
    job = await timers.get_job(biz, job_id)
    while job.state != state:
        assert time.monotonic() < deadline, (
            f"job {biz}/{job_id}: expected state {state!r}, got {job.state!r} after {timeout_s}s:"
            f" {job.model_dump()}"
        )
        await asyncio.sleep(0.2)
        job = await timers.get_job(biz, job_id)
    return job


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not true after {timeout_s}s"
        await asyncio.sleep(0.2)


# --- SDK + receiver ----------------------------------------------------------------------------


async def test_sdk_creates_and_the_business_app_receives_verified_callbacks(
    stack: Stack, business_app: BusinessApp, progress: Progress
) -> None:
    started = time.monotonic()
    biz = unique_name("sdk")
    transport = CountingTransport()
    async with AsyncTimerClient(stack.api_url, transport=transport) as timers:
        config = await timers.put_biz_type(
            biz, callback_url=business_app.url("/callback"), signing_secret=NEW_SECRET
        )
        assert (config.biz_type, config.has_signing_secret) == (biz, True), config
        assert "signing_secret" not in config.model_dump(), "the secret must never come back"
        got = await timers.get_biz_type(biz)
        assert got.callback_url == business_app.url("/callback"), got
        assert got.has_signing_secret, got
        listed = {b.biz_type for b in await timers.list_biz_types()}
        assert biz in listed, f"expected {biz} among {sorted(map(str, listed))}"

        # Single creates: delay_ms, aware datetimes in two zones, an RFC 3339 string,
        # explicit ids and one id the SDK generates.
        t0 = now_ms()
        expected: dict[str, Any] = {}  # job_id -> payload the callback must carry
        singles: list[Job] = []
        for i in range(3):
            job = await timers.create_job(
                biz, delay_ms=2000 + 300 * i, payload={"kind": "delay", "i": i}, job_id=f"d{i}"
            )
            singles.append(job)
        tokyo = datetime.now(ZoneInfo("Asia/Tokyo")) + timedelta(seconds=3)
        ny = datetime.now(ZoneInfo("America/New_York")) + timedelta(seconds=2.5)
        for job_id, when in (("tz-tokyo", tokyo), ("tz-ny", ny)):
            job = await timers.create_job(biz, due_at=when, payload={"kind": job_id}, job_id=job_id)
            want = round(when.timestamp() * 1000)
            assert job.due_at == want, f"{job_id}: expected due_at {want}, got {job.due_at}"
            singles.append(job)
        rfc = datetime.fromtimestamp((t0 + 2800) / 1000, ZoneInfo("Europe/Berlin"))
        job = await timers.create_job(biz, due_at=rfc.isoformat(), job_id="rfc3339")
        assert job.due_at == t0 + 2800, f"expected due_at {t0 + 2800}, got {job.due_at}"
        singles.append(job)
        generated = await timers.create_job(biz, delay_ms=2000, payload=[1, "two"])
        singles.append(generated)
        for job in singles:
            assert job.state == "pending" and job.attempts == 0, job
            expected[job.job_id] = job.payload

        again = await timers.create_job(
            biz, delay_ms=5000, payload={"kind": "delay", "i": 0}, job_id="d0"
        )
        assert again.created_at == singles[0].created_at, "a repeated create is the same job"

        cancel_me = await timers.create_job(biz, delay_ms=3000, job_id="cancel-me")
        move_me = await timers.create_job(biz, delay_ms=60_000, payload={"v": 1}, job_id="move-me")
        assert cancel_me.state == move_me.state == "pending"

        # 1,200 in one call: the SDK sends them as two batches of at most 1,000.
        t1 = now_ms()
        specs: list[Any] = []
        for i in range(BATCH_ITEMS):
            due = t1 + 2000 + i * 2000 // BATCH_ITEMS
            if i % 2:
                specs.append(JobSpec(biz, due_at=due, payload={"b": i}, job_id=f"b{i:04}"))
            else:
                specs.append(
                    {"biz_type": biz, "job_id": f"b{i:04}", "due_at": due, "payload": {"b": i}}
                )
        results = [r async for r in timers.create_jobs(specs)]
        statuses = sorted({r.status for r in results})
        assert len(results) == BATCH_ITEMS and statuses == [201], (
            f"expected {BATCH_ITEMS} results all 201, got {len(results)} with {statuses}"
        )
        assert [r.job.job_id for r in results if r.job] == [f"b{i:04}" for i in range(BATCH_ITEMS)]
        batches = transport.count("POST", "/v1/jobs:batch")
        assert batches == 2, f"expected 2 batch requests for {BATCH_ITEMS} items, got {batches}"
        for res in results:
            assert res.ok and res.job is not None
            expected[res.job.job_id] = res.job.payload
        progress(f"created {len(expected) + 2} jobs in {now_ms() - t0} ms")

        cancelled = await timers.cancel_job(biz, "cancel-me")
        assert cancelled.state == "cancelled" and cancelled.next_attempt_at is None, cancelled
        moved = await timers.reschedule_job(biz, "move-me", delay_ms=2000, payload={"v": 2})
        assert moved.state == "pending" and moved.payload == {"v": 2}, moved
        # 2 s from the reschedule, not from the create (however long the batch above took).
        assert moved.due_at == moved.updated_at + 2000 < move_me.due_at, (move_me, moved)
        expected["move-me"] = {"v": 2}

        keys = {(biz, job_id) for job_id in expected}
        await business_app.wait_for(keys, timeout_s=45)
        t_all = time.monotonic() - started
        progress(f"{len(keys)} callbacks verified and received after {t_all:.1f} s")
        # The reference Standard Webhooks library accepts every one of them as well (a
        # plain secret signs with its UTF-8 bytes), and names the same message id.
        reference = Webhook(NEW_SECRET.encode())
        for body, headers in business_app.raw:
            signed = reference.verify(body, headers)
            assert headers["webhook-id"] == f"{signed['biz_type']}:{signed['job_id']}", headers
        await asyncio.sleep(1.0)  # a duplicate, or the cancelled job, would arrive now

        assert (biz, "cancel-me") not in business_app.received, "a cancelled job was called back"
        assert set(business_app.received) == keys, sorted(set(business_app.received) ^ keys)[:5]
        dupes = {k: len(v) for k, v in business_app.received.items() if len(v) > 1}
        assert dupes == {}, f"expected one callback per job, got duplicates {dupes}"
        for (cb_biz, job_id), (cb,) in business_app.received.items():
            assert cb.payload == expected[job_id], (job_id, expected[job_id], cb.payload)
            assert cb.idempotency_key == f"{cb_biz}:{job_id}", cb
            assert cb.attempt == 1, cb
            assert cb.fired_at >= cb.due_at, f"{job_id} fired {cb.due_at - cb.fired_at} ms early"
        mv = business_app.received[(biz, "move-me")][0]
        assert mv.due_at == moved.due_at, (moved.due_at, mv.due_at)

        for job in [*singles, moved]:
            final = await wait_state(timers, biz, job.job_id, "delivered", timeout_s=10)
            assert final.attempts == 1 and final.delivered_at is not None, final
            assert [h.status_code for h in final.history] == [200], final.history
            assert final.history[0].at == business_app.received[(biz, job.job_id)][0].fired_at
        still = await timers.get_job(biz, "cancel-me")
        assert still.state == "cancelled" and still.attempts == 0, still

        # Every delivered job, over several pages of 500.
        # The outcome is recorded after the 200 is read: wait for the store to catch up.
        async def all_delivered() -> bool:
            seen = [j async for j in timers.list_jobs(biz, state="delivered", page_size=1000)]
            return len(seen) == len(expected)

        waited = time.monotonic()
        await eventually(all_delivered, f"{len(expected)} jobs delivered", timeout_s=20)
        progress(f"all listed as delivered {time.monotonic() - waited:.1f} s later")
        pages_before = transport.count("GET", "/v1/jobs")
        delivered = [j async for j in timers.list_jobs(biz, state="delivered", page_size=500)]
        pages = transport.count("GET", "/v1/jobs") - pages_before
        ids = [j.job_id for j in delivered]
        assert len(ids) == len(set(ids)), "a job was listed twice across pages"
        assert set(ids) == set(expected), (
            f"expected {len(expected)} delivered jobs, got {len(ids)}; "
            f"difference e.g. {sorted(set(ids) ^ set(expected))[:5]}"
        )
        assert all(j.state == "delivered" for j in delivered)
        assert pages >= 3, f"expected >= 3 pages of 500 for {len(ids)} jobs, got {pages}"
        async_view = await timers.get_job(biz, "tz-tokyo")

    # The blocking client, off the event loop.
    def blocking_reads() -> tuple[Job, list[str]]:
        with TimerClient(stack.api_url) as sync_timers:
            job = sync_timers.get_job(biz, "tz-tokyo")
            cancelled_ids = [
                j.job_id for j in sync_timers.list_jobs(biz, state="cancelled", page_size=1)
            ]
            return job, cancelled_ids

    sync_view, cancelled_ids = await asyncio.to_thread(blocking_reads)
    assert sync_view == async_view, f"expected {async_view}, got {sync_view}"
    assert cancelled_ids == ["cancel-me"], cancelled_ids

    # The dependency refuses what the service did not sign, and accepts the old secret too.
    body, headers = business_app.raw[0]
    signed = {k: v for k, v in headers.items() if k.startswith(("webhook-", "idempotency"))}
    doc = json.loads(body)
    tampered = json.dumps({**doc, "payload": {"evil": True}}).encode()
    async with httpx.AsyncClient(base_url=business_app.url(""), timeout=10) as http:

        async def post(content: bytes, hdrs: dict[str, str]) -> httpx.Response:
            return await http.post(
                "/callback", content=content, headers={**hdrs, "content-type": "application/json"}
            )

        before = sum(len(v) for v in business_app.received.values())
        r = await post(tampered, signed)
        assert r.status_code == 401, f"tampered body: expected 401, got {r.status_code} {r.text}"
        unsigned = {k: v for k, v in signed.items() if k != "webhook-signature"}
        r = await post(body, unsigned)
        assert r.status_code == 401, f"unsigned: expected 401, got {r.status_code} {r.text}"
        stale_s = str(now_ms() // 1000 - 600)
        stale_sig = sign(NEW_SECRET, signed["webhook-id"], stale_s, body)
        stale = {**signed, "webhook-timestamp": stale_s, "webhook-signature": stale_sig}
        r = await post(body, stale)
        assert r.status_code == 401, f"stale timestamp: expected 401, got {r.status_code}"
        assert sum(len(v) for v in business_app.received.values()) == before
        ts = str(now_ms() // 1000)
        own = json.dumps({**doc, "biz_type": "self-signed"}).encode()
        own_id = f"self-signed:{doc['job_id']}"
        forged = {"idempotency-key": "forged", "webhook-id": own_id, "webhook-timestamp": ts}
        r = await post(own, {**forged, "webhook-signature": sign(OLD_SECRET, own_id, ts, own)})
        assert r.status_code == 200, f"old secret: expected 200, got {r.status_code} {r.text}"
        (cb,) = business_app.received[("self-signed", doc["job_id"])]
        assert cb.idempotency_key == own_id, f"expected the signed webhook-id, got {cb}"
    print(f"[{stack.kind}] SDK test took {time.monotonic() - started:.1f} s")


# --- CLI ---------------------------------------------------------------------------------------


@dataclass
class Cli:
    api_url: str

    async def run(self, *args: str, expect: int = 0) -> tuple[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "TIMER_API_TOKEN"}
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "timer-service"),
            *args,
            env={**env, "TIMER_API_URL": self.api_url},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 60)
        out, err = out_b.decode(), err_b.decode()
        assert proc.returncode == expect, (
            f"timer-service {' '.join(args)}: expected exit {expect}, got {proc.returncode}\n"
            f"stdout:\n{out}\nstderr:\n{err}"
        )
        return out, err

    async def json(self, *args: str) -> Any:
        out, _ = await self.run(*args)
        try:
            return json.loads(out)
        except ValueError:
            raise AssertionError(
                f"timer-service {' '.join(args)}: stdout is not JSON:\n{out}"
            ) from None

    async def problem(self, *args: str, expect: int = 1) -> dict[str, Any]:
        """A problem on stderr and the exit code for it: 3 not found, 1 other API errors."""
        out, err = await self.run(*args, expect=expect)
        assert out == "", f"timer-service {' '.join(args)}: expected no stdout, got {out!r}"
        try:
            problem: dict[str, Any] = json.loads(err)
        except ValueError:
            raise AssertionError(
                f"timer-service {' '.join(args)}: stderr is not JSON:\n{err}"
            ) from None
        return problem


async def test_cli_pause_and_resume_keep_the_secret_and_limits(
    stack: Stack, business_app: BusinessApp
) -> None:
    """`biz-types pause|resume` patch `paused` alone: a signed, rate-limited biz type keeps
    its secret and limits, and the job held by the pause arrives signed (the business
    app's verifier refuses an unsigned callback, which would make it dead)."""
    cli = Cli(stack.api_url)
    biz = unique_name("cli-pause")
    limits = {"rate_limit_per_s": 20.0, "burst": 2, "max_concurrency": 4}
    await cli.json(
        "biz-types", "put", biz, "--callback-url", business_app.url("/callback"),
        "--signing-secret", NEW_SECRET, "--rate-limit-per-s", "20", "--burst", "2",
        "--max-concurrency", "4", "--json", json.dumps({"retry": {"max_attempts": 1}}),
    )  # fmt: skip

    paused = await cli.json("biz-types", "pause", biz)

    assert (paused["paused"], paused["has_signing_secret"]) == (True, True), paused
    assert {k: paused[k] for k in limits} == limits, paused
    async with AsyncTimerClient(stack.api_url) as timers:
        # Due 2 s after the pause: a pause reaches the notifiers within about a second.
        await timers.create_job(biz, delay_ms=2000, job_id="held")
        await asyncio.sleep(3.5)
        assert (biz, "held") not in business_app.received, "a paused biz type called back"

        resumed = await cli.json("biz-types", "resume", biz)

        assert (resumed["paused"], resumed["has_signing_secret"]) == (False, True), resumed
        assert {k: resumed[k] for k in limits} == limits, resumed
        await business_app.wait_for({(biz, "held")}, timeout_s=15)
        job = await wait_state(timers, biz, "held", "delivered")
        assert job.attempts == 1, job.model_dump()


async def test_every_cli_subcommand_against_the_live_service(
    stack: Stack, business_app: BusinessApp
) -> None:
    started = time.monotonic()
    cli = Cli(stack.api_url)
    biz = unique_name("cli")
    good_url = business_app.url("/callback")
    retry = {"max_attempts": 3, "initial_backoff_ms": 200, "max_backoff_ms": 1000}

    put = await cli.json(
        "biz-types", "put", biz, "--callback-url", good_url, "--signing-secret", NEW_SECRET,
        "--max-concurrency", "8", "--json", json.dumps({"retry": retry, "burst": 5}),
    )  # fmt: skip
    want = {"biz_type": biz, "callback_url": good_url, "max_concurrency": 8, "burst": 5}
    assert {k: put.get(k) for k in want} == want, f"expected {want}, got {put}"
    assert put["has_signing_secret"] is True and "signing_secret" not in put, put
    assert put["retry"]["max_attempts"] == 3, put

    got = await cli.json("biz-types", "get", biz)
    assert got == put, f"expected {put}, got {got}"
    listed = await cli.json("biz-types", "list")
    assert isinstance(listed, list) and biz in [b["biz_type"] for b in listed], listed
    table, _ = await cli.run("biz-types", "list", "--table")
    header, *rows = table.splitlines()
    assert header.split()[:2] == ["biz_type", "callback_url"], f"table header: {header!r}"
    assert any(row.split()[:2] == [biz, good_url] for row in rows), table

    async with AsyncTimerClient(stack.api_url) as timers:
        for job_id, delay in (("cli-get", 1500), ("cli-cancel", 60_000), ("cli-move", 60_000)):
            await timers.create_job(biz, delay_ms=delay, payload={"job": job_id}, job_id=job_id)
        await timers.create_job(biz, delay_ms=60_000, job_id="cli-move-at")

        conflict = await cli.problem("biz-types", "delete", biz)
        assert conflict.get("status") == 409, (
            f"delete with pending jobs: expected 409, got {conflict}"
        )

        job = await cli.json("jobs", "get", biz, "cli-get")
        assert (job["biz_type"], job["job_id"]) == (biz, "cli-get"), job
        assert job["payload"] == {"job": "cli-get"}, job
        missing = await cli.problem("jobs", "get", biz, "no-such-job", expect=3)
        assert missing.get("status") == 404, f"expected a 404 problem, got {missing}"

        cancelled = await cli.json("jobs", "cancel", biz, "cli-cancel")
        assert cancelled["state"] == "cancelled", f"expected cancelled, got {cancelled}"
        moved = await cli.json(
            "jobs", "reschedule", biz, "cli-move", "--delay-ms", "1500",
            "--payload", '{"moved": "by-cli"}',
        )  # fmt: skip
        assert (moved["state"], moved["payload"]) == ("pending", {"moved": "by-cli"}), moved
        at = datetime.now(ZoneInfo("Asia/Kolkata")).replace(microsecond=0) + timedelta(seconds=2)
        moved_at = await cli.json(
            "jobs", "reschedule", biz, "cli-move-at", "--due-at", at.isoformat()
        )
        want_due = round(at.timestamp() * 1000)
        assert moved_at["due_at"] == want_due, f"expected due_at {want_due}, got {moved_at}"
        assert moved_at["payload"] is None, "rescheduling without --payload keeps the payload"

        # A dead job: the callback answers 400; replayed once the URL is fixed.
        dead_biz = unique_name("clidead")
        await timers.put_biz_type(
            dead_biz, callback_url=business_app.url("/reject"), signing_secret=NEW_SECRET
        )
        await timers.create_job(dead_biz, delay_ms=0, payload={"p": 1}, job_id="doomed")
        dead = await wait_state(timers, dead_biz, "doomed", "dead")
        assert dead.attempts == 1 and business_app.rejected == ["doomed"], (
            dead,
            business_app.rejected,
        )
        refused = await cli.problem("jobs", "replay", biz, "cli-get")
        assert refused.get("status") == 409, f"replay of a live job: expected 409, got {refused}"
        await timers.put_biz_type(dead_biz, callback_url=good_url, signing_secret=NEW_SECRET)
        # The broker re-reads biz type configs every DISCOVER_EVERY_S (1 s, broker/app.py); a
        # replay sent sooner may still go to the old URL, get its 400 and be dead again.
        await asyncio.sleep(1.5)
        replayed = await cli.json("jobs", "replay", dead_biz, "doomed")
        assert replayed["state"] in ("pending", "dispatched", "delivered"), replayed
        revived = await wait_state(timers, dead_biz, "doomed", "delivered")
        await business_app.wait_for({(dead_biz, "doomed")}, timeout_s=5)
        assert business_app.rejected == ["doomed"], "the replay went to the old callback_url"
        codes = [h.status_code for h in revived.history]
        assert codes == [400, 200], f"expected history [400, 200], got {codes}"
        (cb,) = business_app.received[(dead_biz, "doomed")]
        assert (cb.attempt, cb.payload) == (2, {"p": 1}), cb

        live = {"cli-get", "cli-move", "cli-move-at"}
        await business_app.wait_for({(biz, j) for j in live}, timeout_s=20)
        for job_id in live:
            await wait_state(timers, biz, job_id, "delivered")
    assert business_app.received[(biz, "cli-move")][0].payload == {"moved": "by-cli"}

    listing = await cli.json(
        "jobs", "list", "--biz-type", biz, "--state", "delivered", "--page-size", "1"
    )
    got_ids = sorted(j["job_id"] for j in listing)
    assert got_ids == sorted(live), f"expected {sorted(live)}, got {got_ids}"
    capped = await cli.json(
        "jobs", "list", "--biz-type", biz, "--page-size", "1", "--max-items", "2"
    )
    assert len(capped) == 2, f"--max-items 2: got {len(capped)} jobs"
    table, _ = await cli.run("jobs", "list", "--biz-type", biz, "--table")
    header, *rows = table.splitlines()
    assert header.split()[:3] == ["biz_type", "job_id", "state"], f"table header: {header!r}"
    states = {row.split()[1]: row.split()[2] for row in rows}
    want_states = {**dict.fromkeys(live, "delivered"), "cli-cancel": "cancelled"}
    assert states == want_states, f"expected {want_states}, got {states}"
    one, _ = await cli.run("jobs", "get", biz, "cli-cancel", "--table")
    assert one.splitlines()[0].startswith("biz_type"), one

    for name in (biz, dead_biz):
        out, _ = await cli.run("biz-types", "delete", name)
        assert out == "", f"biz-types delete prints nothing; got {out!r}"
        gone = await cli.problem("biz-types", "get", name, expect=3)
        assert gone.get("status") == 404, f"after delete: expected 404, got {gone}"
    names = [b["biz_type"] for b in await cli.json("biz-types", "list")]
    assert biz not in names and dead_biz not in names, names
    print(f"\n[{stack.kind}] CLI test took {time.monotonic() - started:.1f} s")
