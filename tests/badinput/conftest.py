"""One `timer-service api` subprocess per module, on its own SecantusDB database."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.e2e.harness import Service
from tests.support import SecantusServer, free_port, unique_name

BIZ_TYPE = "orders"


@dataclass
class Api:
    service: Service
    biz_type: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.service.port}"

    @property
    def pid(self) -> int:
        assert self.service.proc is not None
        return self.service.proc.pid

    def assert_running(self) -> None:
        proc = self.service.proc
        assert proc is not None and proc.poll() is None, (
            f"api process exited ({None if proc is None else proc.returncode}); "
            f"log:\n{self.service.tail()}"
        )


def start_api(secantus: SecantusServer, **extra_env: str) -> Api:
    port = free_port()
    env = {
        "TIMER_MONGO_URL": secantus.url,
        "TIMER_MONGO_DB": unique_name("bad"),
        "TIMER_HTTP_PORT": str(port),
        "TIMER_LOG_LEVEL": "WARNING",
        "TIMER_SHUTDOWN_GRACE_S": "3",
        **extra_env,
    }
    service = Service("api", env, port, name=f"badinput-api-{env['TIMER_MONGO_DB']}").start()
    api = Api(service, BIZ_TYPE)
    r = httpx.put(
        f"{api.url}/v1/biz-types/{BIZ_TYPE}",
        json={"callback_url": "http://127.0.0.1:9/callback"},
        timeout=10,
    )
    assert r.status_code in (200, 201), f"registering {BIZ_TYPE}: {r.status_code} {r.text}"
    return api


@pytest.fixture(scope="module")
def api(secantus: SecantusServer) -> Iterator[Api]:
    api = start_api(secantus)
    try:
        yield api
    finally:
        api.service.stop_quietly()
