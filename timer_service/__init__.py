"""Distributed timer service: persisted delayed HTTP callbacks."""

__version__ = "0.1.0"
