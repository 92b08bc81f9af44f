"""A process that dies in the middle of a move leaves its transaction open until the store
ends it (mongod: `transactionLifetimeLimitSeconds`, 60 s by default). Only the moved jobs
may wait that long; every other job must go on being created, loaded and claimed.

The chaos run showed the opposite: after a broker was killed with a retry move open,
every callback of every biz type went out about 60 s late, because the move's
transaction had also renewed the index entry of the jobs' new second (a document every
creator of that second and the daemon's load write too).

The death is simulated at the last moment it can happen: every statement of the move
sent, the commit never sent, the client's connections reset."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from pymongo.asynchronous.client_session import AsyncClientSession

from tests.faultproxy import FaultProxy
from tests.support import SecantusServer, unique_name
from timer_service import jobs as machine
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.model import Attempt, BizType
from timer_service.store.mongo import MongoStore
from timer_service.store.mongo.layout import guard_filter
from timer_service.store.mongo.moves import MOVE_MARK_MS, Move, Mover

pytestmark = pytest.mark.integration

BUCKETS = 60
PROMPT_S = 10.0  # a write that waits on nothing takes milliseconds, even here
FENCE = 1


@pytest.fixture
async def stores(secantus: SecantusServer) -> AsyncIterator[tuple[MongoStore, MongoStore, Any]]:
    """The dying process's store (through a proxy) and a live one's (direct)."""
    db = unique_name("abandoned_move")
    with FaultProxy.from_url(secantus.url) as proxy:
        live = MongoStore(secantus.url, db, buckets=BUCKETS)
        dying = MongoStore(proxy.url_for(secantus.url), db, buckets=BUCKETS)
        await live.setup()
        await live.biz_types.put_biz_type(BizType("orders", "http://127.0.0.1:1/cb"))
        try:
            yield live, dying, proxy
        finally:
            await dying.close()
            await live.layout.db.client.drop_database(db)
            await live.close()


async def within(seconds: float, what: str, call: Any) -> Any:
    started = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError:
        pytest.fail(f"{what} still waiting after {time.monotonic() - started:.1f} s")


def rescheduled_by_a_dying_process(
    stores: tuple[MongoStore, MongoStore, Any], job_id: str, due_at: int, now: int
) -> contextlib.AbstractAsyncContextManager[None]:
    """The dying process (an API) reschedules the job: see `moved_by_a_dying_process`."""
    return moved_by_a_dying_process(
        stores, lambda dying: dying.jobs.reschedule_job("orders", job_id, due_at, None, now)
    )


@contextlib.asynccontextmanager
async def moved_by_a_dying_process(
    stores: tuple[MongoStore, MongoStore, Any],
    move: Callable[[MongoStore], Coroutine[Any, Any, Any]],
) -> AsyncIterator[None]:
    """The dying process starts `move` and dies with every statement of its transaction
    sent and the commit not: its connections reset, nothing more comes from it. On
    leaving, the open transaction is ended (as mongod would after its lifetime) so that
    the database can be dropped."""
    live, dying, proxy = stores
    dead = asyncio.Event()
    sessions: list[AsyncClientSession] = []

    async def die_before_commit(session: AsyncClientSession) -> None:
        sessions.append(session)
        await asyncio.to_thread(proxy.set_mode, "refuse")
        await asyncio.to_thread(proxy.reset_all)
        dead.set()
        await asyncio.Event().wait()  # a killed process sends nothing more

    original = AsyncClientSession.commit_transaction
    setattr(AsyncClientSession, "commit_transaction", die_before_commit)  # noqa: B010
    moving = asyncio.create_task(move(dying))
    try:
        await within(PROMPT_S, "the move's statements", dead.wait())
        setattr(AsyncClientSession, "commit_transaction", original)  # noqa: B010
        yield
    finally:
        setattr(AsyncClientSession, "commit_transaction", original)  # noqa: B010
        for session in sessions:
            await live.layout.db.client.admin.command("killSessions", [session.session_id])
        proxy.set_mode("pass")
        moving.cancel()
        with contextlib.suppress(BaseException):
            await moving


async def test_a_move_left_open_by_a_dead_process_holds_only_its_own_jobs(
    stores: tuple[MongoStore, MongoStore, Any],
) -> None:
    live = stores[0]
    now = int(time.time() * 1000)
    old_due = (now // 1000 + 120) * 1000  # bucket (s mod 60) ...
    new_due = old_due + 30_000  # ... another one
    new_second = new_due // 1000
    # Both buckets already hold jobs, as in any store that has run a while (SecantusDB
    # flags an index multikey in its catalog with the first array it meets, and that
    # first write, made inside the transaction, would hold every later one).
    await live.jobs.create_jobs(
        [
            NewJob("orders", "moved", old_due, "null"),
            NewJob("orders", "earlier", new_due - BUCKETS * 1000, "null"),
        ],
        now,
    )
    async with rescheduled_by_a_dying_process(stores, "moved", new_due, now):
        # The API creates another job due in the moved job's new second.
        created = await within(
            PROMPT_S,
            "a create in the moved job's new second",
            live.jobs.create_jobs([NewJob("orders", "other", new_due + 10, "null")], now),
        )
        assert [r.status.value for r in created] == ["created"]
        # The daemon reaches that second: finds its entry, loads and claims it.
        entries = await within(
            PROMPT_S,
            "the daemon's read of the index",
            live.scan.next_seconds(new_second, new_second, 10),
        )
        assert [e.second for e in entries] == [new_second]
        loaded = await within(
            PROMPT_S,
            "the daemon's load of that second",
            live.scan.load_second(new_second, FENCE),
        )
        assert [key for key, _ in loaded] == ["orders/other"]
        claimed = await within(
            PROMPT_S,
            "the daemon's claim in that second",
            live.scan.claim_due(new_second, new_due + 10, "c1", FENCE, new_due + 10),
        )
        assert [c.job_id for c in claimed] == ["other"]


async def test_a_move_group_that_fails_leaves_the_groups_before_it_indexed(
    stores: tuple[MongoStore, MongoStore, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each group's new second is renewed right after its own commit, so a failure in a
    later group does not leave the jobs already moved without an entry (to wait for the
    overdue sweep)."""
    live, _, _ = stores
    now = int(time.time() * 1000)
    base = (now // 1000 + 120) * 1000
    # Two jobs in different buckets, each moving to yet another: two groups.
    await live.jobs.create_jobs(
        [NewJob("orders", "a", base, "null"), NewJob("orders", "b", base + 1000, "null")], now
    )
    moves = []
    for job_id, new_due in (("a", base + 20_000), ("b", base + 40_000)):
        job = await live.jobs.get_job("orders", job_id)
        assert job is not None
        doc = await live.layout.bucket(job.due_at // 1000).find_one({"_id": job.key})
        assert doc is not None
        change = machine.reschedule(job, new_due, None, now)
        moves.append(Move(doc, change.apply(job), guard_filter(change.guard)))

    real_commit = AsyncClientSession.commit_transaction
    commits = 0

    async def second_commit_fails(session: AsyncClientSession) -> None:
        nonlocal commits
        commits += 1
        if commits == 2:
            raise RuntimeError("the store went away")
        await real_commit(session)

    monkeypatch.setattr(AsyncClientSession, "commit_transaction", second_commit_fails)
    with pytest.raises(RuntimeError):
        await Mover(live.layout).move_many(moves)
    monkeypatch.undo()
    first_second = (base + 20_000) // 1000
    entries = await live.scan.next_seconds(first_second, first_second, 10)
    assert [e.second for e in entries] == [first_second], "the first group's job has no entry"
    assert [k for k, _ in await live.scan.load_second(first_second, FENCE)] == ["orders/a"]


async def create_moved_and_neighbour(live: MongoStore, due: int, moves_to: int, now: int) -> None:
    """ "moved" (due at `due`, to be moved to `moves_to`), "neighbour" in the same second,
    and a job already in the bucket of `moves_to` (see the first test: SecantusDB's
    first array in a bucket, written inside the move's transaction, would hold it)."""
    await live.jobs.create_jobs(
        [
            NewJob("orders", "moved", due, "null"),
            NewJob("orders", "neighbour", due + 5, "null"),
            NewJob("orders", "earlier", moves_to - BUCKETS * 1000, "null"),
        ],
        now,
    )


async def test_a_reschedule_left_open_by_a_dead_api_does_not_hold_the_daemon_s_claim(
    stores: tuple[MongoStore, MongoStore, Any],
) -> None:
    """A reschedule's transaction deletes the job's old document while it is still
    `pending`; if the API dies before the commit, a claim of the old second that wrote
    that document would wait until the store ends the transaction (60 s on mongod), and
    the scan loop, which claims one second at a time, with it. The move marks the
    document first, and the claim passes it by: the claim answers at once with the
    other jobs of that second."""
    live = stores[0]
    now = int(time.time() * 1000)
    old_due = (now // 1000 + 120) * 1000
    new_due = old_due + 30_000
    await create_moved_and_neighbour(live, old_due, new_due, now)
    old_second = old_due // 1000
    async with rescheduled_by_a_dying_process(stores, "moved", new_due, now):
        claimed = await within(
            PROMPT_S,
            "the daemon's claim in the moved job's old second",
            live.scan.claim_due(old_second, old_due + 10, "c1", FENCE, now),
        )
        assert [c.job_id for c in claimed] == ["neighbour"]
    # The store has ended the transaction (as mongod does after its lifetime): the move
    # never happened, and once its mark runs out the job is claimed where it was.
    assert await live.scan.claim_due(old_second, old_due + 10, "c2", FENCE, now) == []
    later = now + MOVE_MARK_MS + 1
    claimed = await live.scan.claim_due(old_second, old_due + 10, "c3", FENCE, later)
    assert [(c.job_id, c.due_at) for c in claimed] == [("moved", old_due)]


async def test_a_retry_left_open_by_a_dead_broker_does_not_hold_another_s_send_marks(
    stores: tuple[MongoStore, MongoStore, Any],
) -> None:
    """A broker dies inside the move of a retry (the callback failed, the job moves to
    its next attempt's bucket). Its messages go to another broker, whose send mark of
    that batch (taking the sends over) answers at once for the other job and passes
    the moved one by: it is the reconciler's once its mark runs out."""
    live = stores[0]
    now = int(time.time() * 1000)
    due = (now // 1000 + 120) * 1000
    retry_at = due + 30_000
    await create_moved_and_neighbour(live, due, retry_at, now)
    claimed = await live.scan.claim_due(due // 1000, due + 10, "c1", FENCE, now)
    assert sorted(c.job_id for c in claimed) == ["moved", "neighbour"]
    refs = {c.job_id: SendRef("orders", c.job_id, c.second, "c1") for c in claimed}
    assert len(await live.outcomes.start_sending(list(refs.values()), "s1", now)) == 2
    failed = Outcome(
        refs["moved"], OutcomeKind.RETRY, Attempt(1, now, 503, None, 5), next_attempt_at=retry_at
    )
    retaken = [dataclasses.replace(r, retake=True) for r in refs.values()]
    async with moved_by_a_dying_process(
        stores, lambda dying: dying.outcomes.record_outcomes([failed], now)
    ):
        marked = await within(
            PROMPT_S,
            "another broker's send marks",
            live.outcomes.start_sending(retaken, "s2", now),
        )
        assert sorted(marked) == ["orders/neighbour"]


async def test_a_move_that_fails_takes_its_mark_off(
    stores: tuple[MongoStore, MongoStore, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reschedule whose transaction fails leaves the job where it was, claimable at
    once: its mark does not keep the daemon off it until it runs out, and its second
    has an entry again even if the daemon had released it meanwhile (a claim that
    passed the marked job by finds the second empty)."""
    live = stores[0]
    now = int(time.time() * 1000)
    due = (now // 1000 + 120) * 1000
    await live.jobs.create_jobs(
        [
            NewJob("orders", "a", due, "null"),
            NewJob("orders", "earlier", due + 30_000 - BUCKETS * 1000, "null"),
        ],
        now,
    )

    async def commit_fails(session: AsyncClientSession) -> None:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(AsyncClientSession, "commit_transaction", commit_fails)
    await live.layout.seconds.delete_many({"_id": due // 1000})  # as a release would
    with pytest.raises(RuntimeError):
        await live.jobs.reschedule_job("orders", "a", due + 30_000, None, now)
    monkeypatch.undo()
    entries = await live.scan.next_seconds(due // 1000, due // 1000, 1)
    assert [e.second for e in entries] == [due // 1000], "the job's second has no entry"
    doc = await live.layout.bucket(due // 1000).find_one({"_id": "orders/a"})
    assert doc is not None and "move" not in doc and "move_until" not in doc
    claimed = await live.scan.claim_due(due // 1000, due + 10, "c1", FENCE, now)
    assert [(c.job_id, c.due_at) for c in claimed] == [("a", due)]
