"""Fixtures every unit test may ask for: `make_api` and `api` (tests/unit/api_harness.py,
with `prepared_routes`, the routes its apps share within the run; `new_app` for a test
that builds its own app),
`world` (tests/unit/broker_harness.py), `rendered` (tests/unit/manifests_harness.py),
`store` and `clock` (tests/unit/daemon_harness.py; a file may define its own)."""

import importlib.util
import sys

from tests.unit.api_harness import api, make_api, prepared_routes
from tests.unit.broker_harness import world
from tests.unit.daemon_harness import clock, store
from tests.unit.manifests_harness import rendered

# httpx's ASGITransport asks on every request whether trio runs, by importing sniffio.
# Not installed here, each failed import searched sys.path again (~0.1 ms a request, the
# unit tier sends ~35,000): recorded as absent, the import fails at once.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

__all__ = ["api", "clock", "make_api", "prepared_routes", "rendered", "store", "world"]
