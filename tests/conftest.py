"""Fixtures shared by every test layer."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.e2e.harness import Receiver
from tests.support import AMQP_URL, Progress, SecantusServer, secantus_server, unique_name
from timer_service.clock import FakeClock


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `known_bug` reproduce a bug not fixed yet: they fail, so the default run
    leaves them out (deselected, not skipped); TIMER_KNOWN_BUGS=1 runs them."""
    if os.environ.get("TIMER_KNOWN_BUGS") == "1":
        return
    known = [item for item in items if item.get_closest_marker("known_bug")]
    if known:
        config.hook.pytest_deselected(items=known)
        items[:] = [item for item in items if not item.get_closest_marker("known_bug")]


@pytest.fixture(scope="module")
def secantus() -> Iterator[SecantusServer]:
    """One SecantusDB server per test module; each test takes its own database. Not one
    for the session: SecantusDB gets slower with every database created and dropped on
    it (server CPU per read or write +33-51 % after 300, bench/store_churn_bench.py),
    so a module late in the run met a slower store than when run alone, and its timing
    bounds failed only in the full suite. A start costs under a second."""
    with secantus_server() as server:
        yield server


@pytest.fixture
def mongo_url(secantus: SecantusServer) -> str:
    return secantus.url


@pytest.fixture
def mongo_db() -> str:
    return unique_name("db")


@pytest.fixture
def amqp_url() -> str:
    return AMQP_URL


@pytest.fixture
def queue_prefix() -> str:
    return unique_name("tq")


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def mongo_store(mongo_url: str, mongo_db: str) -> AsyncIterator[object]:
    from timer_service.store.mongo import MongoStore

    store = MongoStore(mongo_url, mongo_db, buckets=60, retention_ms=30 * 86_400_000)
    await store.setup()
    try:
        yield store
    finally:
        await store.drop_database()
        await store.close()


@pytest.fixture
async def memory_store() -> AsyncIterator[object]:
    from timer_service.store.memory import MemoryStore
    from timer_service.store.recording import recording

    store = recording(MemoryStore(buckets=60, retention_ms=30 * 86_400_000))
    await store.setup()
    yield store
    await store.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A loopback HTTP receiver recording every callback (e2e and fault tests)."""
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
def progress(request: pytest.FixtureRequest) -> Progress:
    """Live progress lines for a long test (see `Progress`)."""
    return Progress(request.node.name, request.config)
