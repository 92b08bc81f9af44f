"""The SDK's operator calls against the real API (`dev`): labels and search filters, bulk
actions with a dry run, stats, the audit log and secret rotation, so the paths and shapes
the unit tests fake are the server's. The contract's newer endpoints (biz type PATCH,
calendar, tokens) are checked when the server serves them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Stack, dev_stack
from tests.e2e.harness import now_ms
from tests.support import unique_name
from timer_service.client import AsyncTimerClient, ClientError, JobSpec

pytestmark = pytest.mark.e2e

HOUR_MS = 3_600_000
NOT_SERVED = (404, 405)  # an endpoint this server does not have yet


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = dev_stack(str(tmp_path_factory.mktemp("data")), TIMER_CANARY_INTERVAL_MS="0")
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


async def test_labels_filters_bulk_stats_audit_and_rotation(dev: Stack) -> None:
    biz = unique_name("ops")
    async with AsyncTimerClient(dev.api_url) as timers:
        await timers.put_biz_type(
            biz, callback_url="http://127.0.0.1:9/never", burst=5, signing_secret="old-secret"
        )
        t0 = now_ms()
        created = await timers.create_job(
            biz, job_id="order-1", due_at=t0 + HOUR_MS, labels={"tenant": "acme"}
        )
        assert created.labels == {"tenant": "acme"}, created
        specs = [
            JobSpec(biz, due_at=t0 + HOUR_MS + i, job_id=f"order-{i}", labels={"tenant": "b"})
            for i in range(2, 6)
        ]
        unlabelled = {"biz_type": biz, "job_id": "x", "delay_ms": HOUR_MS}
        results = [r async for r in timers.create_jobs([*specs, unlabelled])]
        assert [r.status for r in results] == [201] * 5, results

        acme = [j.job_id async for j in timers.list_jobs(biz, labels={"tenant": "acme"})]
        assert acme == ["order-1"], acme
        prefixed = [j.job_id async for j in timers.list_jobs(biz, job_id_prefix="order-")]
        assert sorted(prefixed) == [f"order-{i}" for i in (1, 2, 3, 4, 5)], prefixed
        window = [
            j.job_id
            async for j in timers.list_jobs(
                biz, due_after=t0 + HOUR_MS + 2, due_before=t0 + HOUR_MS + 4
            )
        ]
        assert sorted(window) == ["order-2", "order-3"], window
        page = await timers.list_jobs_page(biz, "pending", 2)
        assert len(page.items) == 2 and page.next_cursor, page
        second = await timers.list_jobs_page(biz, "pending", 2, cursor=page.next_cursor)
        assert {j.job_id for j in second.items}.isdisjoint(j.job_id for j in page.items)

        dry = await timers.bulk_cancel(biz, labels={"tenant": "b"}, dry_run=True)
        assert (dry.dry_run, dry.matched, dry.changed) == (True, 4, 0), dry
        done = await timers.bulk_cancel(biz, labels={"tenant": "b"}, limit=3)
        while done.next_cursor:
            done = await timers.bulk_cancel(biz, labels={"tenant": "b"}, cursor=done.next_cursor)
        cancelled = [j.job_id async for j in timers.list_jobs(biz, "cancelled")]
        assert sorted(cancelled) == [f"order-{i}" for i in range(2, 6)], cancelled
        replayed = await timers.bulk_replay(biz, dry_run=True)
        assert replayed.matched == 0, replayed

        stats = await timers.biz_type_stats(biz)
        assert (stats.counts.pending, stats.counts.cancelled) == (2, 4), stats
        everyone = await timers.stats()
        assert biz in {item.biz_type for item in everyone.items}, everyone

        rotated = await timers.rotate_signing_secret(biz, keep_previous_for_s=60)
        assert rotated.signing_secret and rotated.has_signing_secret, rotated
        assert rotated.signing_secret_rotating_until is not None, rotated
        assert (await timers.get_biz_type(biz)).has_signing_secret

        actions = [e.action async for e in timers.list_audit(biz)]
        assert "jobs.bulk_cancel" in actions and "biz_type.rotate_secret" in actions, actions
        first = await timers.audit_page(biz, page_size=1)
        assert len(first.items) == 1 and first.next_cursor, first

        await check_newer_endpoints(timers, biz, t0)


async def check_newer_endpoints(timers: AsyncTimerClient, biz: str, t0: int) -> None:
    """PATCH, calendar and tokens: as the contract says, where the server has them."""
    paused = await timers.pause_biz_type(biz)
    assert paused.paused and paused.has_signing_secret and paused.burst == 5, paused
    resumed = await timers.resume_biz_type(biz)
    assert not resumed.paused and resumed.has_signing_secret, resumed
    try:
        calendar = await timers.calendar(t0, t0 + 2 * HOUR_MS, 60_000, biz_type=biz)
    except ClientError as exc:
        assert exc.status in NOT_SERVED, exc
    else:
        assert calendar.step_ms == 60_000 and sum(b.due for b in calendar.buckets) == 2
    with pytest.raises(ClientError) as open_api:  # no TIMER_API_TOKEN: no tokens, 409
        await timers.create_token("team", "viewer", [biz])
    assert open_api.value.status == 409, open_api.value
