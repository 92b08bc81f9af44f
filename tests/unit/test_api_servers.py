"""GET /v1/servers over the in-memory store and a FakeClock: daemons with their
partition leases, brokers with the biz types the token covers, and the canary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.unit.access_harness import IN, OUT, bearer, secret_of, seeded
from tests.unit.api_harness import NOW, Api, expect
from timer_service.access import Role
from timer_service.canary import Canary
from timer_service.constants import CANARY_BIZ_TYPE
from timer_service.dispatch import HeldBiz, LeaseState, Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt, second_of
from timer_service.partitions import lease_name
from timer_service.registration import Registrar
from timer_service.servers import CanaryState, canary_view, daemons_view


async def test_daemons_brokers_and_canary_as_stored(make_api: Callable[..., Any]) -> None:
    api: Api = await make_api(partitions=3, canary_interval_ms=10_000)
    leases = api.store.leases
    await leases.acquire_leases([lease_name(0), lease_name(1)], "daemon-a", 7, 5_000, NOW)
    await leases.acquire_leases([lease_name(2)], "daemon-b", 8, 1_000, NOW)
    held = [HeldBiz("orders", 4, NOW - 250), HeldBiz(CANARY_BIZ_TYPE, 1, NOW - 100)]
    await api.store.brokers.broker_heartbeat(
        "broker-1", held, NOW, 3_000, consuming=["orders", CANARY_BIZ_TYPE]
    )
    api.metrics.canary_arrived(0.004, (NOW - 2_000) / 1000)
    api.clock.advance(2_000)  # daemon-b's lease lapses; daemon-a's and the broker's do not

    got = expect(await api.request("GET", "/v1/servers"), 200)

    assert got["at"] == NOW + 2_000
    daemons = got["daemons"]
    assert daemons["partitions"] == 3 and daemons["unowned"] == [2], daemons
    a, b = daemons["items"]
    assert (a["holder"], a["live"], b["holder"], b["live"]) == ("daemon-a", True, "daemon-b", False)
    assert a["partitions"][0] == {
        "partition": 0,
        "fence": 7,
        "expires_at": NOW + 5_000,
        "left_ms": 3_000,
        "lapsed": False,
    }
    assert b["partitions"][0]["lapsed"] and b["partitions"][0]["left_ms"] == -1_000, b
    [broker] = got["brokers"]
    assert broker["broker_id"] == "broker-1" and not broker["lapsed"], broker
    assert broker["left_ms"] == 1_000, broker
    assert broker["consuming"] == ["orders"], "the canary's biz type is never listed"
    assert broker["held"] == [
        {
            "biz_type": "orders",
            "messages": 4,
            "oldest_claimed_at": NOW - 250,
            "oldest_age_ms": 2_250,
        }
    ]
    assert got["canary"] == {
        "enabled": True,
        "interval_ms": 10_000,
        "last_success_at": NOW - 2_000,
        "age_ms": 4_000,
        "lookback_ms": 60_000,
        "alive": True,
    }


async def test_a_scoped_viewer_sees_every_broker_but_only_its_biz_types(
    make_api: Callable[..., Any],
) -> None:
    api = await seeded(make_api)
    await api.store.brokers.broker_heartbeat(
        "broker-1", [HeldBiz(IN, 1, NOW), HeldBiz(OUT, 2, NOW)], NOW, 3_000, consuming=[IN, OUT]
    )
    viewer = expect(
        await api.request("GET", "/v1/servers", headers=bearer(secret_of(Role.VIEWER))), 200
    )
    [broker] = viewer["brokers"]
    assert broker["consuming"] == [IN] and [h["biz_type"] for h in broker["held"]] == [IN]
    admin = expect(
        await api.request("GET", "/v1/servers", headers=bearer(secret_of(Role.ADMIN, False))), 200
    )
    assert admin["brokers"][0]["consuming"] == [IN, OUT], admin


async def test_the_canary_off_says_so_and_one_never_seen_is_not_alive(
    make_api: Callable[..., Any],
) -> None:
    off: Api = await make_api(canary_interval_ms=0)
    got = expect(await off.request("GET", "/v1/servers"), 200)
    assert got["canary"]["enabled"] is False and got["canary"]["last_success_at"] is None
    assert got["daemons"] == {"partitions": 1, "unowned": [0], "items": []}
    assert got["brokers"] == []
    never = canary_view(CanaryState(10_000, None), NOW)
    assert never["enabled"] and not never["alive"] and never["age_ms"] is None


def test_a_canary_three_intervals_old_is_not_alive() -> None:
    assert canary_view(CanaryState(1_000, NOW - 2_999), NOW)["alive"]
    assert not canary_view(CanaryState(1_000, NOW - 3_000), NOW)["alive"]


def test_leases_that_are_not_partitions_are_left_out() -> None:
    leases = [LeaseState("daemon-pX", "d", 1, NOW + 1), LeaseState(lease_name(0), "d", 1, NOW)]
    got = daemons_view(leases, 1, NOW)
    assert got["unowned"] == [0], "a lease expiring now has lapsed"
    assert [p["partition"] for p in got["items"][0]["partitions"]] == [0]


async def test_a_canary_another_replica_received_is_read_from_the_store(
    make_api: Callable[..., Any],
) -> None:
    """This replica's gauge never moved: the delivered canary attempt in the store tells."""
    api: Api = await make_api(canary_interval_ms=10_000)
    canary = Canary(
        api.store.biz_types,
        Registrar(api.store.jobs, api.metrics),
        api.clock,
        interval_ms=10_000,
        callback_url="http://other-replica/canary",
    )
    await canary.ensure_biz_type()
    job = (await canary.create_next()).job
    [claimed] = await api.store.scan.claim_due(
        second_of(job.due_at), job.due_at, "c", 1, job.due_at
    )
    ref = SendRef(claimed.biz_type, claimed.job_id, claimed.second, claimed.claim)
    arrived = job.due_at + 8
    done = Outcome(ref, OutcomeKind.DELIVERED, Attempt(1, arrived, 204, None, 2))
    await api.store.outcomes.record_outcomes([done], arrived)
    api.clock.set(arrived + 5_000)
    assert api.metrics.canary_last_success_s() is None
    canary_now = expect(await api.request("GET", "/v1/servers"), 200)["canary"]
    assert (canary_now["last_success_at"], canary_now["age_ms"]) == (arrived, 5_000), canary_now
    assert canary_now["alive"], canary_now

    api.clock.set(arrived + 61_000)  # past the store's lookback: not seen, not alive
    later = expect(await api.request("GET", "/v1/servers"), 200)["canary"]
    assert later["last_success_at"] is None and not later["alive"], later


async def test_a_broker_whose_beat_lapsed_is_shown_lapsed(make_api: Callable[..., Any]) -> None:
    api: Api = await make_api()
    await api.store.brokers.broker_heartbeat("broker-1", [], NOW, 3_000, consuming=["orders"])
    api.clock.advance(3_500)
    [broker] = expect(await api.request("GET", "/v1/servers"), 200)["brokers"]
    assert (broker["lapsed"], broker["left_ms"], broker["held"]) == (True, -500, []), broker
