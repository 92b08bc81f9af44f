"""What the unit harness shares between tests (tests/unit/api_harness.py,
settings_harness.py) leaves each test's app its own: its OpenAPI document, its routes,
and Settings that read the environment the test set."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.settings_harness import settings


async def test_each_app_gets_its_own_openapi_document(make_api: Any) -> None:
    first, second = await make_api(), await make_api()
    one = (await first.request("GET", "/openapi.json")).json()
    two = (await second.request("GET", "/openapi.json")).json()
    assert one == two and "/v1/jobs" in one["paths"], sorted(one["paths"])[:5]
    app_one = first.client._transport.app  # type: ignore[attr-defined]
    app_two = second.client._transport.app  # type: ignore[attr-defined]
    assert app_one.openapi() is not app_two.openapi()
    app_one.openapi()["paths"].clear()  # a test that changes its document
    assert app_two.openapi()["paths"], "a change to one app's document reached another"


async def test_a_route_a_test_adds_is_in_its_apps_document_only(make_api: Any) -> None:
    first, second = await make_api(), await make_api()

    async def extra() -> dict[str, str]:
        return {}

    first.client._transport.app.add_api_route("/extra", extra)  # type: ignore[attr-defined]
    own = (await first.request("GET", "/openapi.json")).json()
    other = (await second.request("GET", "/openapi.json")).json()
    assert "/extra" in own["paths"] and "/extra" not in other["paths"]


def test_settings_are_shared_per_values_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings(api_token="a") is settings(api_token="a")
    assert settings(api_token="a") is not settings(api_token="b")
    monkeypatch.setenv("TIMER_HTTP_PORT", "9191")
    assert settings(api_token="a").http_port == 9191
