"""Access tokens across two real `timer-service api` processes on one store: a token
created through one works on the other, and once revoked through one, the other
refuses it within the contract's 5 s. Driven through the SDK, as an operator would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.harness import Service
from tests.support import AMQP_URL, SecantusServer, free_port, unique_name
from timer_service.client import AsyncTimerClient, ClientError

pytestmark = pytest.mark.e2e

BOOT = "e2e-bootstrap-token"
REVOCATION_BOUND_S = 5.0


@pytest.fixture
def two_apis(secantus: SecantusServer) -> Iterator[tuple[Service, Service]]:
    env = {
        "TIMER_MONGO_URL": secantus.url,
        "TIMER_MONGO_DB": unique_name("tokens"),
        "TIMER_AMQP_URL": AMQP_URL,
        "TIMER_QUEUE_PREFIX": unique_name("tokens"),
        "TIMER_API_TOKEN": BOOT,
        "TIMER_CANARY_INTERVAL_MS": "0",
        "TIMER_SHUTDOWN_GRACE_S": "2",
    }
    ports = free_port(), free_port()
    apis = [
        Service("api", {**env, "TIMER_HTTP_PORT": str(port)}, port, name=f"api-{i}")
        for i, port in enumerate(ports)
    ]
    try:
        for api in apis:
            api.start()
        yield apis[0], apis[1]
    finally:
        for api in apis:
            api.stop_quietly()


def url(service: Service) -> str:
    return f"http://127.0.0.1:{service.port}"


def refused_after(service: Service, secret: str, bound_s: float) -> float:
    """Seconds until `service` answers 401 to `secret`; fails past `bound_s`."""
    started = time.monotonic()
    while True:
        r = httpx.get(f"{url(service)}/v1/biz-types", headers={"Authorization": f"Bearer {secret}"})
        waited = time.monotonic() - started
        if r.status_code == 401:
            return waited
        assert r.status_code == 200, f"expected 200 or 401, got {r.status_code}: {r.text}"
        assert waited <= bound_s, f"{service.name} still accepts it after {waited:.1f}s"
        time.sleep(0.05)


async def test_a_token_revoked_through_one_api_is_refused_by_the_other(
    two_apis: tuple[Service, Service],
) -> None:
    one, two = two_apis
    biz = unique_name("team")
    async with AsyncTimerClient(url(one), token=BOOT) as admin:
        await admin.put_biz_type(biz, callback_url="http://127.0.0.1:9/never")
        made = await admin.create_token("orders-team", "producer", [biz])
        assert made.token.startswith("tmr_") and made.role == "producer", made
        listed = await admin.list_tokens()
        assert [t.id for t in listed] == [made.id], listed
        assert "tmr_" not in repr(listed), "a listing shows no secret"

    async with AsyncTimerClient(url(two), token=made.token) as team:
        deadline = time.monotonic() + 2  # a new token: known on a miss within a second
        while True:
            try:
                created = await team.create_job(biz, job_id="o-1", delay_ms=3_600_000)
                break
            except ClientError as exc:
                assert exc.status == 401 and time.monotonic() < deadline, exc
                await asyncio.sleep(0.1)
        assert created.job_id == "o-1", created
        with pytest.raises(ClientError) as refused:
            await team.create_job(unique_name("other"), delay_ms=1000)
        assert refused.value.status == 403, refused.value

    async with AsyncTimerClient(url(one), token=BOOT) as admin:
        await admin.delete_token(made.id)
        assert await admin.list_tokens() == []
    assert refused_after(one, made.token, 0.0) == pytest.approx(0, abs=0.5), "at once here"
    waited = refused_after(two, made.token, REVOCATION_BOUND_S)
    print(f"revoked token refused by the other API after {waited:.2f}s")
    assert waited <= REVOCATION_BOUND_S, waited
