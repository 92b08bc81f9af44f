"""Response models of the servers view (`GET /v1/servers`, docs/api.md "Servers")."""

from __future__ import annotations

from pydantic import BaseModel, Field


class LeasedPartitionOut(BaseModel):
    partition: int
    fence: int = Field(description="The fencing token the lease was taken under.")
    expires_at: int = Field(description="Epoch ms; the holder renews it before then.")
    left_ms: int = Field(description="`expires_at - at`; negative once lapsed.")
    lapsed: bool


class DaemonOut(BaseModel):
    holder: str = Field(description="The daemon's id (its lease holder name).")
    live: bool = Field(description="It holds at least one lease that has not lapsed.")
    partitions: list[LeasedPartitionOut]


class DaemonsOut(BaseModel):
    partitions: int = Field(description="How many partitions there are (TIMER_PARTITIONS).")
    unowned: list[int] = Field(description="Partitions no live lease covers: nothing fires.")
    items: list[DaemonOut]


class HeldOut(BaseModel):
    biz_type: str
    messages: int = Field(description="Messages the broker holds of this biz type.")
    oldest_claimed_at: int
    oldest_age_ms: int


class BrokerOut(BaseModel):
    broker_id: str
    expires_at: int = Field(description="When its last heartbeat lapses (epoch ms).")
    left_ms: int
    lapsed: bool
    consuming: list[str] = Field(description="Biz types it consumes that the token covers.")
    held: list[HeldOut]


class CanaryOut(BaseModel):
    enabled: bool = Field(description="False when TIMER_CANARY_INTERVAL_MS is 0.")
    interval_ms: int
    last_success_at: int | None = Field(description="Epoch ms of the last canary arrival.")
    age_ms: int | None
    lookback_ms: int | None = Field(
        description=(
            "How far back the store was searched for a canary: an older arrival shows only"
            " if this replica received it (null when off)."
        )
    )
    alive: bool = Field(description="A canary arrived within the last three intervals.")


class ServersOut(BaseModel):
    at: int
    daemons: DaemonsOut
    brokers: list[BrokerOut]
    canary: CanaryOut
