"""Settings, parsed once at the edge from TIMER_* environment variables (and .env)."""

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from timer_service.constants import DEFAULT_BUCKETS

PRODUCTION_MONGO_URL = "mongodb://127.0.0.1:27017"
PRODUCTION_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TIMER_", env_file=".env", extra="ignore", frozen=True
    )

    # None means "the command's default": `dev` embeds a store / an in-process
    # queue, the other commands use the production URLs above.
    mongo_url: str | None = None
    mongo_db: str = "timer"
    amqp_url: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # daemon 9101, broker 9102
    api_token: str | None = None
    data_dir: str = "./.timer-data"
    queue_prefix: str = "timer"
    lease_ttl_ms: int = Field(default=5000, ge=100)
    reconcile_after_ms: int = Field(default=60000, ge=100)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_payload_bytes: int = Field(default=65536, ge=1)
    horizon_days: int = Field(default=3650, ge=1)
    retention_days: float = Field(default=30, gt=0)
    shutdown_grace_s: float = Field(default=10, ge=0)
    log_level: str = "INFO"
    # OpenTelemetry spans: "none" (default: OpenTelemetry is not even imported),
    # "console" (printed) or "otlp" (OTEL_EXPORTER_OTLP_* say where); the `otel` extra.
    otel_exporter: Literal["none", "console", "otlp"] = "none"

    # Implementation settings (documented in the README).
    buckets: int = Field(default=DEFAULT_BUCKETS, ge=1, le=3600)
    lookahead_ms: int = Field(default=5000, ge=1000)  # how far ahead the daemon loads seconds
    claim_ahead_ms: int = Field(default=1000, ge=0, le=1500)  # claim + publish this much before due
    catchup_rate_per_s: int = Field(default=5000, ge=1)  # bound on backlog dispatch after downtime
    publish_batch: int = Field(default=1000, ge=1)
    broker_prefetch: int = Field(default=2000, ge=1)
    stats_interval_s: float = Field(default=300, ge=0)  # timer_jobs_by_state sample; 0 = off

    @property
    def retention_ms(self) -> int:
        return int(self.retention_days * 86_400_000)

    @property
    def horizon_ms(self) -> int:
        return self.horizon_days * 86_400_000

    def mongo_url_or_default(self) -> str:
        return self.mongo_url or PRODUCTION_MONGO_URL

    def amqp_url_or_default(self) -> str:
        return self.amqp_url or PRODUCTION_AMQP_URL
