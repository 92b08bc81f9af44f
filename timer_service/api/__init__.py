"""The REST API (FastAPI): biz types, jobs, health and metrics."""

from timer_service.api.app import create_app

__all__ = ["create_app"]
