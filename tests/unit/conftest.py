"""Fixtures every unit test may ask for: `make_api` and `api` (tests/unit/api_harness.py),
`world` (tests/unit/broker_harness.py)."""

from tests.unit.api_harness import api, make_api
from tests.unit.broker_harness import world

__all__ = ["api", "make_api", "world"]
