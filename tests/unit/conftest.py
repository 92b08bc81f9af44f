"""Fixtures every unit test may ask for: `make_api` and `api` (tests/unit/api_harness.py),
`world` (tests/unit/broker_harness.py), `rendered` (tests/unit/manifests_harness.py)."""

from tests.unit.api_harness import api, make_api
from tests.unit.broker_harness import world
from tests.unit.manifests_harness import rendered

__all__ = ["api", "make_api", "rendered", "world"]
