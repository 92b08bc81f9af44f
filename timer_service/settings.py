"""Settings, parsed once at the edge from TIMER_* environment variables (and .env)."""

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from timer_service.callback_targets import TargetPolicy, parse_cidrs
from timer_service.constants import DEFAULT_BUCKETS
from timer_service.partitions import DEFAULT_PARTITIONS, MAX_PARTITIONS

PRODUCTION_MONGO_URL = "mongodb://127.0.0.1:27017"
PRODUCTION_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"

DEFAULT_TOKEN_NAME = "default"  # the name of TIMER_API_TOKEN's token
TOKEN_NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def parse_named_tokens(text: str | None) -> dict[str, str]:
    """`"alice=tok1,ci=tok2"` as {"alice": "tok1", "ci": "tok2"}; ValueError on a bad
    entry, a repeated name or a token given to two names."""
    tokens: dict[str, str] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, sep, token = entry.strip().partition("=")
        if not sep or not TOKEN_NAME_RE.match(name) or not token:
            raise ValueError(
                f"TIMER_API_TOKENS entry {name!r} is not name=token (a name of letters,"
                " digits and _.@-, a token of at least one character)"
            )
        if name in tokens:
            raise ValueError(f"TIMER_API_TOKENS names {name!r} twice")
        if token in tokens.values():
            raise ValueError(f"TIMER_API_TOKENS gives {name!r} a token another name has")
        tokens[name] = token
    return tokens


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
    api_token: str | None = None  # the token named "default"
    api_tokens: str | None = None  # named tokens: "alice=tok1,ci=tok2"
    allowed_hosts: str | None = None  # Host header values answered: "a.example,*.svc"
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
    # "auto": uvloop where installed on Linux (less CPU per fired job), else asyncio's.
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    # OpenTelemetry spans: "none" (default: OpenTelemetry is not even imported),
    # "console" (printed) or "otlp" (OTEL_EXPORTER_OTLP_* say where); the `otel` extra.
    otel_exporter: Literal["none", "console", "otlp"] = "none"

    # Callback targets (docs/operations.md, "Callback targets"): loopback and private
    # addresses are allowed as the contract says; turn them off in a cluster whose
    # internal services callbacks must not reach. Extra ranges: CIDRs, comma-separated.
    callback_allow_private: bool = True
    callback_deny_cidrs: str = ""

    # Implementation settings (documented in the README).
    buckets: int = Field(default=DEFAULT_BUCKETS, ge=1, le=3600)
    # Fixed when the store is first initialised (docs/operations.md, "Partitions").
    partitions: int = Field(default=DEFAULT_PARTITIONS, ge=1, le=MAX_PARTITIONS)
    lookahead_ms: int = Field(default=5000, ge=1000)  # how far ahead the daemon loads seconds
    claim_ahead_ms: int = Field(default=1000, ge=0, le=1500)  # claim + publish this much before due
    catchup_rate_per_s: int = Field(default=5000, ge=1)  # bound on backlog dispatch after downtime
    publish_batch: int = Field(default=1000, ge=1)
    claim_batch: int = Field(default=1000, ge=1)  # at most this many jobs per claim
    broker_prefetch: int = Field(default=2000, ge=1)
    # A held message goes back to the queue (and comes straight back) before this, so
    # that RabbitMQ's consumer_timeout (30 min by default) never closes the channel.
    broker_max_hold_ms: int = Field(default=900_000, ge=1000)
    stats_interval_s: float = Field(default=300, ge=0)  # timer_jobs_by_state sample; 0 = off
    # Admission control (docs/operations.md, "Overload"): /v1 requests at work at once,
    # and how long one beyond that may wait for a slot before its 503.
    api_max_inflight: int = Field(default=64, ge=1)
    api_admission_wait_ms: int = Field(default=1000, ge=0, le=5000)
    # The canary (docs/operations.md, "Canary"): a job of the service's own every
    # interval, called back at TIMER_CANARY_URL (default: this API's /canary); 0 = off.
    canary_interval_ms: int = Field(default=10_000, ge=0)
    canary_url: str | None = None

    @model_validator(mode="after")
    def _tokens_parse(self) -> Self:
        self.named_tokens()  # raises ValueError saying what is wrong
        return self

    def named_tokens(self) -> dict[str, str]:
        """Name -> token of every accepted bearer token; empty when auth is off."""
        tokens = parse_named_tokens(self.api_tokens)
        if self.api_token:
            if DEFAULT_TOKEN_NAME in tokens:
                raise ValueError(
                    f"TIMER_API_TOKENS names a token {DEFAULT_TOKEN_NAME!r}, the name of"
                    " TIMER_API_TOKEN: use one or the other"
                )
            if self.api_token in tokens.values():
                raise ValueError("TIMER_API_TOKEN is also one of TIMER_API_TOKENS")
            tokens[DEFAULT_TOKEN_NAME] = self.api_token
        return tokens

    def allowed_host_list(self) -> list[str] | None:
        """The Host header values answered; None = any (no check)."""
        if self.allowed_hosts is None:
            return None
        return [host.strip().lower() for host in self.allowed_hosts.split(",") if host.strip()]

    def with_default_hosts(self) -> Self:
        """These settings with `allowed_hosts` defaulted for the listen address: on a
        loopback address only local names (a web page that rebinds its DNS name to
        127.0.0.1 is not answered); on any other address every host (a k8s Service
        is reached by several names). Set TIMER_ALLOWED_HOSTS to narrow it."""
        if self.allowed_hosts is not None:
            return self
        local = self.http_host in LOOPBACK_HOSTS
        return self.model_copy(update={"allowed_hosts": ",".join(LOOPBACK_HOSTS) if local else "*"})

    @field_validator("api_token")
    @classmethod
    def _token_not_empty(cls, value: str | None) -> str | None:
        # An empty token would turn authentication off as silently as no token.
        if value is not None and not value.strip():
            raise ValueError("TIMER_API_TOKEN is empty: set a token, or unset it to run without")
        return value

    @field_validator("callback_deny_cidrs")
    @classmethod
    def _cidrs_parse(cls, value: str) -> str:
        parse_cidrs(value)  # a bad range stops the process at start, naming it
        return value

    def callback_target_policy(self) -> TargetPolicy:
        return TargetPolicy(self.callback_allow_private, parse_cidrs(self.callback_deny_cidrs))

    @property
    def retention_ms(self) -> int:
        return int(self.retention_days * 86_400_000)

    @property
    def horizon_ms(self) -> int:
        return self.horizon_days * 86_400_000

    def canary_url_or_default(self) -> str:
        """Where canary callbacks go: TIMER_CANARY_URL, else this API's own /canary (on
        127.0.0.1 when it listens on every address)."""
        if self.canary_url:
            return self.canary_url
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "") else self.http_host
        if host == "::":
            host = "::1"
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.http_port}/canary"

    def mongo_url_or_default(self) -> str:
        return self.mongo_url or PRODUCTION_MONGO_URL

    def amqp_url_or_default(self) -> str:
        return self.amqp_url or PRODUCTION_AMQP_URL
