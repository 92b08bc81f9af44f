"""MongoDB only: how many commands the hot path's calls send (each is a round trip)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest
from pymongo import AsyncMongoClient, monitoring

from tests.contract.stores import NOW, claim_second, create, new
from tests.support import SecantusServer, unique_name
from timer_service.dispatch import SendRef
from timer_service.model import second_of
from timer_service.store.mongo import MongoStore

pytestmark = pytest.mark.integration


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in {"hello", "isMaster", "ping", "endSessions"}:
            self.sent[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def wired(secantus: SecantusServer) -> AsyncIterator[tuple[MongoStore, Commands]]:
    commands = Commands()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        secantus.url, tz_aware=True, event_listeners=[commands]
    )
    store = MongoStore(secantus.url, unique_name("wire"), buckets=60, client=client)
    await store.setup()
    yield store, commands
    await store.drop_database()
    await store.close()


async def claimed_refs(store: MongoStore, *job_ids: str) -> list[SendRef]:
    await create(store, *(new(j) for j in job_ids))
    claimed = await claim_second(store, second_of(NOW + 5000))
    return [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]


async def test_a_lone_job_s_send_mark_is_one_command(
    wired: tuple[MongoStore, Commands],
) -> None:
    # At a trickle every mark is of one job: an update and a read of what it took
    # were two round trips per fired job.
    store, commands = wired
    refs = await claimed_refs(store, "a")
    commands.sent.clear()
    marked = await store.outcomes.start_sending(refs, "t1", NOW + 1)
    assert set(marked) == {"orders/a"} and marked["orders/a"].payload_json == "null"
    assert sum(commands.sent.values()) == 1, commands.sent


async def test_a_batch_s_send_mark_of_messages_carrying_their_jobs_is_one_update(
    wired: tuple[MongoStore, Commands],
) -> None:
    store, commands = wired
    await create(store, *(new(j) for j in "abc"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    assert all(c.job is not None for c in claimed), "a claim's messages carry their jobs"
    refs = [
        SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, job=c.job)
        for c in claimed
    ]
    commands.sent.clear()
    assert len(await store.outcomes.start_sending(refs, "t1", NOW + 1)) == 3
    assert commands.sent == Counter({"update": 1}), commands.sent


async def test_a_batch_s_send_mark_without_the_jobs_is_an_update_and_a_read_per_bucket(
    wired: tuple[MongoStore, Commands],
) -> None:
    store, commands = wired
    refs = await claimed_refs(store, "a", "b", "c")
    commands.sent.clear()
    assert len(await store.outcomes.start_sending(refs, "t1", NOW + 1)) == 3
    assert commands.sent == Counter({"update": 1, "find": 1}), commands.sent


async def test_a_claim_of_more_than_a_default_batch_reads_its_jobs_in_one_command(
    wired: tuple[MongoStore, Commands],
) -> None:
    # A cursor's first batch is 101 documents unless the find says otherwise: the
    # read-back of a claim of 150 jobs was a find and a getMore (bench/roundtrips_bench).
    store, commands = wired
    await create(store, *(new(f"j{i}") for i in range(150)))
    s = second_of(NOW + 5000)
    await store.scan.next_seconds(s, s, 1)  # as the daemon: listed, so its buckets known
    commands.sent.clear()
    assert len(await claim_second(store, s)) == 150
    # The jobs' update, their read-back, and the calendar's count of the second (the
    # claimed jobs leave the pending count: docs/architecture.md, "Load calendar").
    assert commands.sent == Counter({"update": 2, "find": 1}), commands.sent


async def test_a_claim_of_a_second_never_listed_reads_its_entry_first(
    wired: tuple[MongoStore, Commands],
) -> None:
    store, commands = wired
    await create(store, new("a"))
    commands.sent.clear()
    assert len(await claim_second(store, second_of(NOW + 5000))) == 1
    # The entry's read, the jobs' update and read-back, and the calendar's count.
    assert commands.sent == Counter({"update": 2, "find": 2}), commands.sent


async def test_a_mark_of_more_than_a_default_batch_reads_its_jobs_in_one_command(
    wired: tuple[MongoStore, Commands],
) -> None:
    store, commands = wired
    refs = await claimed_refs(store, *(f"j{i}" for i in range(150)))
    commands.sent.clear()
    assert len(await store.outcomes.start_sending(refs, "t1", NOW + 1)) == 150
    assert commands.sent == Counter({"update": 1, "find": 1}), commands.sent


async def test_a_round_opened_while_others_close_is_one_command(
    wired: tuple[MongoStore, Commands],
) -> None:
    store, commands = wired
    await store.rounds.open_round("c1", 1, NOW)
    commands.sent.clear()
    await store.rounds.open_round("c2", 1, NOW + 1, closing=["c1"])
    assert sum(commands.sent.values()) == 1, commands.sent


async def test_a_send_mark_of_two_claims_in_one_bucket_is_one_update(
    wired: tuple[MongoStore, Commands],
) -> None:
    """At a steady rate a lane's mark spans the end of one claim and the start of the
    next: one update per claim was 1.7 commands per mark (bench/batching_bench.py)."""
    store, commands = wired
    second = second_of(NOW + 5000)
    await create(store, new("a"), new("b"), new("c", NOW + 5500), new("d", NOW + 5500))
    claimed = await store.scan.claim_due(second, NOW + 5000, "c1", 1, NOW)
    claimed += await store.scan.claim_due(second, NOW + 5999, "c2", 1, NOW)
    assert {c.claim for c in claimed} == {"c1", "c2"} and len(claimed) == 4, claimed
    refs = [
        SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, job=c.job)
        for c in claimed
    ]
    commands.sent.clear()
    marked = await store.outcomes.start_sending(refs, "t1", NOW + 1)
    assert commands.sent == Counter({"update": 1}), commands.sent
    for key, job in marked.items():
        assert job == await store.jobs.get_job(*key.split("/")), key
    assert sorted(marked) == ["orders/a", "orders/b", "orders/c", "orders/d"]
