"""`settings(**values)`: the unit tests' `Settings`, built once per set of values.

Building a `Settings` reads every field's environment variable (pydantic-settings): about
1 ms a time, and the API and daemon harnesses built one per app, ~1,200 in a unit run.
`Settings` is frozen, so one instance serves every test that asks for the same values;
the key includes the process's TIMER_* variables, so a test that sets one (monkeypatch)
gets a `Settings` that reads it."""

from __future__ import annotations

import os
from typing import Any

from timer_service.settings import Settings

_BUILT: dict[str, Settings] = {}


def settings(**values: Any) -> Settings:
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TIMER_"))
    key = repr((sorted(values.items()), env))
    built = _BUILT.get(key)
    if built is None:
        built = _BUILT[key] = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    return built
