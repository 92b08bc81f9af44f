"""The API while the store does not answer: 503 + Retry-After, no driver text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.api_harness import expect
from timer_service.errors import StoreUnavailable
from timer_service.model import BizType
from timer_service.store.faulty import FaultyStore
from timer_service.store.memory import MemoryStore


async def test_a_store_outage_is_503_with_retry_after(make_api: Callable[..., Any]) -> None:
    faulty = FaultyStore(MemoryStore())
    api = await make_api(store=faulty)
    await faulty.biz_types.put_biz_type(BizType("orders", "http://127.0.0.1:1/cb"))
    faulty.fail("get_job", times=None)
    faulty.fail("create_jobs", times=None)
    got = await api.request("GET", "/v1/jobs/orders/a")
    problem = expect(got, 503)
    assert got.headers.get("Retry-After") == "2", got.headers
    assert "injected" not in problem["detail"], "driver text leaked into the answer"
    created = await api.create(biz_type="orders", job_id="a", delay_ms=1000)
    assert created.status_code == 503 and created.headers.get("Retry-After"), created.text
    faulty.heal()
    expect(await api.create(biz_type="orders", job_id="a", delay_ms=1000), 201)


async def test_readyz_does_not_show_driver_text(make_api: Callable[..., Any]) -> None:
    async def down() -> None:
        raise StoreUnavailable("pymongo.errors.ServerSelectionTimeoutError: 127.0.0.1:1 refused")

    api = await make_api(ready_checks=[down])
    got = await api.client.get("/readyz")
    problem = expect(got, 503)
    assert "pymongo" not in problem["detail"] and "127.0.0.1" not in problem["detail"], problem
