"""SIGTERM exits 0, and after a restart nothing accepted is lost (issue 4)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile

import httpx
import pytest

from tests.e2e.conftest import dev_stack, split_stack
from tests.e2e.harness import Receiver, now_ms
from tests.support import Progress, SecantusServer, unique_name

pytestmark = pytest.mark.e2e


async def create_jobs(api_url: str, biz: str, ids: list[str], first_due: int, step_ms: int) -> None:
    jobs = [
        {"biz_type": biz, "job_id": job_id, "due_at": first_due + i * step_ms}
        for i, job_id in enumerate(ids)
    ]
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as api:
        r = await api.post("/v1/jobs:batch", json={"jobs": jobs})
        assert r.status_code == 200, r.text
        assert {x["status"] for x in r.json()["results"]} == {201}


async def put_biz(api_url: str, receiver: Receiver) -> str:
    biz = unique_name("biz")
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as api:
        r = await api.put(f"/v1/biz-types/{biz}", json={"callback_url": receiver.url})
        assert r.status_code == 201, r.text
    return biz


async def test_sigterm_each_process_then_restart_loses_nothing(
    secantus: SecantusServer, progress: Progress
) -> None:
    stack = split_stack(secantus)
    receiver = Receiver()
    await receiver.start()
    await asyncio.to_thread(stack.start)
    try:
        biz = await put_biz(stack.api_url, receiver)
        ids = [f"r{i:03}" for i in range(150)]
        await create_jobs(stack.api_url, biz, ids, now_ms() + 2000, 50)  # due over 2 .. 9.5 s
        progress("150 jobs due over the next 2 .. 9.5 s; SIGTERM and restart of each process")
        for name in ("daemon", "broker", "api"):
            await asyncio.sleep(1.0)
            service = stack.services[name]
            code = await asyncio.to_thread(service.terminate)
            assert code == 0, f"{name} exited {code} on SIGTERM:\n{service.tail()}"
            await asyncio.sleep(0.5)
            await asyncio.to_thread(service.start)
            progress(f"{name} exited 0 and is back; {len(receiver.by_job())} jobs called back")
        later = [f"s{i:03}" for i in range(50)]
        await create_jobs(stack.api_url, biz, later, now_ms() + 1000, 20)
        await receiver.wait_for(set(ids) | set(later), timeout_s=60)
        progress("all 200 jobs called back")
        await asyncio.sleep(1.0)
        dupes = {k: len(v) for k, v in receiver.by_job().items() if len(v) > 1}
        print(f"\n[split restarts] 200 jobs, lost 0, duplicates {len(dupes)}")
        assert dupes == {}, f"a clean SIGTERM should not duplicate callbacks: {dupes}"
        assert all(a.fired_at >= a.due_at for a in receiver.arrivals)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        await asyncio.to_thread(stack.stop)
        await receiver.stop()


async def test_dev_restart_fires_jobs_registered_before(progress: Progress) -> None:
    data_dir = tempfile.mkdtemp(prefix="timer-dev-")
    receiver = Receiver()
    await receiver.start()
    stack = dev_stack(data_dir)
    try:
        await asyncio.to_thread(stack.start)
        biz = await put_biz(stack.api_url, receiver)
        ids = [f"d{i:03}" for i in range(50)]
        await create_jobs(stack.api_url, biz, ids, now_ms() + 6000, 40)
        code = await asyncio.to_thread(stack.services["dev"].terminate)
        assert code == 0, f"dev exited {code} on SIGTERM:\n{stack.services['dev'].tail()}"
        assert receiver.arrivals == []
        progress("50 jobs registered, dev stopped with 0; starting it again")
        await asyncio.to_thread(stack.services["dev"].start)
        await receiver.wait_for(set(ids), timeout_s=40)
        progress("all 50 called back after the restart")
        await asyncio.sleep(1.0)
        assert sorted(receiver.by_job()) == ids
        assert all(len(v) == 1 for v in receiver.by_job().values())
        assert all(a.fired_at >= a.due_at for a in receiver.arrivals)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        await asyncio.to_thread(stack.stop)
        await receiver.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
