"""Fixtures every unit test may ask for: `make_api` and `api` (tests/unit/api_harness.py)."""

from tests.unit.api_harness import api, make_api

__all__ = ["api", "make_api"]
