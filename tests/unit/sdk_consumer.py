"""A business team's code using every method of both SDK clients: `mypy --strict` must
pass it (tests/unit/test_client_typing.py), and fail a copy with a misspelt argument.
Never run: it only has to type-check."""

from __future__ import annotations

from datetime import UTC, datetime

from timer_service.client import (
    AsyncTimerClient,
    AuditEntry,
    AuditPage,
    BatchItemResult,
    BizStats,
    BizTypeConfig,
    BulkResult,
    Calendar,
    CreatedToken,
    Job,
    JobPage,
    JobSpec,
    Lateness,
    RetryPolicy,
    Schedule,
    SecretRotated,
    Stats,
    TimerClient,
    Token,
)

DUE = datetime(2026, 1, 1, tzinfo=UTC)


def blocking(timers: TimerClient) -> None:
    config: BizTypeConfig = timers.put_biz_type(
        "orders",
        callback_url="https://orders.internal/cb",
        rate_limit_per_s=100.0,
        burst=10,
        max_concurrency=32,
        timeout_ms=5000,
        retry=RetryPolicy(max_attempts=5),
        signing_secret="whsec_c2VjcmV0",
        paused=False,
        registration_rate_per_s=None,
        registration_burst=None,
    )
    assert config.has_signing_secret
    timers.patch_biz_type("orders", rate_limit_per_s=None, retry={"max_attempts": 3})
    paused: BizTypeConfig = timers.pause_biz_type("orders")
    resumed: BizTypeConfig = timers.resume_biz_type("orders")
    assert paused.paused and not resumed.paused
    one: BizTypeConfig = timers.get_biz_type("orders")
    every: list[BizTypeConfig] = timers.list_biz_types()
    rotated: SecretRotated = timers.rotate_signing_secret("orders", keep_previous_for_s=3600)
    secret: str = rotated.signing_secret
    stats: BizStats = timers.biz_type_stats("orders")
    pending: int = stats.counts.pending
    print(one, every, secret, pending)

    job: Job = timers.create_job(
        "orders",
        due_at=DUE,
        payload={"order": 42},
        job_id="order-42",
        labels={"tenant": "acme"},
        window_ms=60_000,
    )
    fire_at: int | None = job.fire_at
    later: Job = timers.create_job("orders", delay_ms=5000)
    specs = [JobSpec("orders", delay_ms=i, labels={"batch": "1"}) for i in range(3)]
    results: list[BatchItemResult] = list(timers.create_jobs(specs, chunk_size=500))
    more: list[BatchItemResult] = list(timers.create_jobs([{"biz_type": "orders", "delay_ms": 0}]))
    got: Job = timers.get_job("orders", job.job_id)
    why: Lateness | None = got.lateness
    waiting_for: str | None = None if why is None else why.waiting_for
    cancelled: Job = timers.cancel_job("orders", later.job_id)
    moved: Job = timers.reschedule_job("orders", "order-42", delay_ms=1000, payload=[1, 2])
    replayed: Job = timers.replay_job("orders", "order-42")
    dead: list[Job] = list(
        timers.list_jobs(
            "orders",
            "dead",
            500,
            labels={"tenant": "acme"},
            job_id_prefix="order-",
            due_after=DUE,
            due_before=1_767_312_000_000,
        )
    )
    page: JobPage = timers.list_jobs_page(state="pending", cursor=None)
    counted: BulkResult = timers.bulk_cancel("orders", labels={"tenant": "acme"}, dry_run=True)
    replay: BulkResult = timers.bulk_replay("orders", state="dead", limit=100, cursor=None)
    print(fire_at, results, more, got, cancelled, moved, replayed, dead, page, counted, replay)
    print(waiting_for)

    schedule: Schedule = timers.put_schedule(
        "orders", "nightly", cron="0 3 * * *", timezone="Europe/Berlin", catchup="one"
    )
    timers.put_schedule("orders", "every-minute", intervals_ms=[60_000], cycle=True, start_at=DUE)
    same: Schedule = timers.get_schedule("orders", "nightly")
    schedules: list[Schedule] = timers.list_schedules("orders")
    extra: Job = timers.run_schedule_now("orders", "nightly")
    skipped: Schedule = timers.skip_next_occurrence("orders", "nightly")
    print(extra, skipped)
    timers.delete_schedule("orders", "nightly")
    print(schedule, same, schedules)

    overall: Stats = timers.stats()
    audit: list[AuditEntry] = list(timers.list_audit("orders", "jobs.bulk_cancel"))
    audit_page: AuditPage = timers.audit_page(page_size=10, cursor=None)
    calendar: Calendar = timers.calendar(DUE, 1_767_312_000_000, 60_000, biz_type="orders")
    busiest: int = max(bucket.due for bucket in calendar.buckets)
    print(overall, audit, audit_page, busiest)

    token: CreatedToken = timers.create_token("orders-team", "producer", ["orders", "refund-*"])
    tokens: list[Token] = timers.list_tokens()
    timers.delete_token(token.id)
    timers.delete_biz_type("orders")
    print(token.token, tokens)

    with timers.with_options(retry_deadline_s=5) as hurried:
        hurried.get_job("orders", "order-42")
    timers.close()


async def non_blocking(timers: AsyncTimerClient) -> None:
    await timers.put_biz_type("orders", callback_url="https://orders.internal/cb")
    await timers.patch_biz_type("orders", signing_secret=None)
    await timers.pause_biz_type("orders")
    await timers.resume_biz_type("orders")
    config: BizTypeConfig = await timers.get_biz_type("orders")
    configs: list[BizTypeConfig] = await timers.list_biz_types()
    rotated: SecretRotated = await timers.rotate_signing_secret("orders")
    stats: BizStats = await timers.biz_type_stats("orders")
    print(config, configs, rotated, stats)

    job: Job = await timers.create_job("orders", due_at="2026-01-01T00:00:00Z", window_ms=0)
    results = [r async for r in timers.create_jobs([JobSpec("orders", delay_ms=0)])]
    ok: bool = all(r.ok for r in results)
    await timers.get_job("orders", job.job_id)
    await timers.cancel_job("orders", job.job_id)
    await timers.reschedule_job("orders", job.job_id, due_at=DUE)
    await timers.replay_job("orders", job.job_id)
    jobs: list[Job] = [j async for j in timers.list_jobs(labels={"tenant": "acme"})]
    page: JobPage = await timers.list_jobs_page("orders", page_size=10)
    await timers.bulk_cancel("orders", due_before=DUE, dry_run=True)
    await timers.bulk_replay("orders", job_id_prefix="order-")
    print(ok, jobs, page)

    await timers.put_schedule("orders", "n", cron="* * * * *", payload={"kind": "tick"})
    await timers.get_schedule("orders", "n")
    await timers.run_schedule_now("orders", "n")
    await timers.skip_next_occurrence("orders", "n")
    await timers.list_schedules()
    await timers.delete_schedule("orders", "n")

    await timers.stats()
    entries: list[AuditEntry] = [e async for e in timers.list_audit()]
    await timers.audit_page("orders")
    await timers.calendar(0, 60_000, 1000)
    print(entries)

    created: CreatedToken = await timers.create_token("ops", "admin")
    await timers.list_tokens()
    await timers.delete_token(created.id)
    await timers.delete_biz_type("orders")

    async with timers.with_options(retry_deadline_s=5, max_attempts=2) as hurried:
        await hurried.get_job("orders", "order-42")
    await timers.close()
