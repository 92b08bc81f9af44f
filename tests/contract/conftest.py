"""The contract suites: one store fixture over both adapters (see stores.py)."""

from tests.contract.stores import store

__all__ = ["store"]
