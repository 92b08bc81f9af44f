"""Fixtures shared by the integration tests of this directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.broker_env import Env, make_env
from tests.support import SecantusServer


@pytest.fixture
async def env(
    mongo_store: Any, queue_prefix: str, secantus: SecantusServer, mongo_db: str
) -> AsyncIterator[Env]:
    """The broker tests' world (tests/integration/broker_env.py)."""
    async for e in make_env(mongo_store, queue_prefix, secantus, mongo_db):
        yield e
