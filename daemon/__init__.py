"""Scan daemon: loads due jobs into an in-memory timing wheel and publishes them on time."""
