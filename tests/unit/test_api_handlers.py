"""Every handler is a module-level function of its routes file, found by name: no
router factory hides handlers in closures."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from fastapi.routing import APIRoute

import timer_service.api
from tests.unit.api_harness import Api

ROUTES_MODULES = [
    importlib.import_module(f"timer_service.api.{info.name}")
    for info in pkgutil.iter_modules(timer_service.api.__path__)
    if info.name.startswith("routes_")
]


def test_every_routes_file_is_a_module_level_router_of_module_level_handlers() -> None:
    # the routes files found (jobs, biz types, schedules, console, health, ...): the
    # discovery must not come back empty, or the loop below would check nothing
    assert len(ROUTES_MODULES) >= 6, [m.__name__ for m in ROUTES_MODULES]
    for module in ROUTES_MODULES:
        for route in module.router.routes:
            assert isinstance(route, APIRoute), f"{module.__name__}: {route}"
            handler = route.endpoint
            assert handler.__qualname__ == handler.__name__, (
                f"{route.path}: {handler.__qualname__} is nested in a function"
            )
            assert getattr(module, handler.__name__) is handler, (
                f"{route.path}: {module.__name__}.{handler.__name__} is not importable"
            )


async def test_the_app_serves_every_route_of_the_routes_files(api: Api) -> None:
    app = api.client._transport.app  # type: ignore[attr-defined]
    served = {pattern.pattern for pattern, _ in app.state.route_methods}
    declared = {
        route.path_regex.pattern for module in ROUTES_MODULES for route in module.router.routes
    }
    assert served == declared, f"served only: {served - declared}, not served: {declared - served}"


async def test_apps_of_one_module_share_prepared_routes_not_state(make_api: Any) -> None:
    """The harness's speed-up (tests/unit/api_harness.py) keeps each test's app its own."""
    first, second = await make_api(), await make_api()
    one, two = (api.client._transport.app for api in (first, second))  # type: ignore[attr-defined]

    included = [r for r in one.router.routes if getattr(r, "original_router", None) is not None]
    assert len(included) == len(ROUTES_MODULES), included
    assert all(any(r is mine for mine in two.router.routes) for r in included)
    assert one.router.routes is not two.router.routes
    assert one.state.context is not two.state.context
    assert first.store is not second.store and first.clock is not second.clock
