"""What the API's job listing assumes of a store's search (api/routes_jobs.py,
`business_jobs`): the keys of the reserved biz types sort together, between digits and
letters, and a search from `PAST_RESERVED` starts right after the last of them."""

from __future__ import annotations

from tests.contract.stores import NOW
from timer_service.api.routes_jobs import PAST_RESERVED
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.jobs import NewJob
from timer_service.search import JobFilter
from timer_service.store.base import Store


async def test_a_search_from_past_reserved_skips_every_reserved_key(store: Store) -> None:
    biz_types = ["0first", "9last-digit", CANARY_BIZ_TYPE, "_zzz", "a", "orders", "z.z"]
    news = [NewJob(biz, f"j{i}", NOW + 60_000, "{}") for biz in biz_types for i in range(3)]
    await store.jobs.create_jobs(news, NOW)

    everything, _ = await store.console.search_jobs(JobFilter(), 100, None)
    order = [job.biz_type for job in everything]
    assert order == sorted(order, key=biz_types.index), order

    after, cursor = await store.console.search_jobs(JobFilter(), 100, PAST_RESERVED)
    assert cursor is None
    expected = [f"{b}/j{i}" for b in ("a", "orders", "z.z") for i in range(3)]
    assert [job.key for job in after] == expected
