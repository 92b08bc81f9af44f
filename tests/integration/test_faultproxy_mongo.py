"""The fault proxy in front of SecantusDB: a write whose reply is lost still happened."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import AutoReconnect

from tests.faultproxy import FaultProxy
from tests.support import SecantusServer, unique_name

pytestmark = pytest.mark.integration

TIMEOUTS: dict[str, Any] = {
    "serverSelectionTimeoutMS": 3000,
    "connectTimeoutMS": 2000,
    "socketTimeoutMS": 3000,
}


async def test_a_lost_insert_reply_fails_the_client_though_the_document_was_written(
    secantus: SecantusServer,
) -> None:
    db_name = unique_name("faultproxy")
    direct: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus.url, **TIMEOUTS)
    with FaultProxy.from_url(secantus.url) as proxy:
        # Polling monitoring and a long heartbeat keep the monitor's hello off the wire once
        # the fault is armed, and no retry may hide the lost reply.
        proxied: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            proxy.url_for(secantus.url),
            retryWrites=False,
            serverMonitoringMode="poll",
            heartbeatFrequencyMS=60_000,
            **TIMEOUTS,
        )
        try:
            # Handshakes of the monitor and of a pooled connection happen before arming.
            await proxied.admin.command("ping")
            proxy.drop_next_reply()
            with pytest.raises(AutoReconnect):
                await proxied[db_name]["jobs"].insert_one({"_id": "job-1", "state": "scheduled"})
            assert proxy.stats().resets == 1

            written = await direct[db_name]["jobs"].find_one({"_id": "job-1"})
            assert written == {"_id": "job-1", "state": "scheduled"}
        finally:
            await proxied.close()
            await direct.drop_database(db_name)
            await direct.close()
