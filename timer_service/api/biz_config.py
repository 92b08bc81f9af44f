"""A biz type's config as the API takes it (`BizTypeIn`) and as the store keeps it
(`BizType`): the one translation PUT and PATCH share."""

from __future__ import annotations

from typing import Any

from timer_service.api.schemas import BizTypeIn
from timer_service.model import BizType, RetryPolicy
from timer_service.quota import default_registration_burst


def registration_burst(config: BizTypeIn) -> int | None:
    """The burst stored: as given, else one second's worth of a quota that has a rate."""
    if config.registration_burst is not None or config.registration_rate_per_s is None:
        return config.registration_burst
    return default_registration_burst(config.registration_rate_per_s)


def stored_config(biz: BizType) -> dict[str, Any]:
    """The PUT body that would store `biz` as it is, its signing secret included: what a
    merge patch applies to. A null field is left out, as a PUT may leave it out: the
    patch's `null` (which removes a member) and absence mean the same default."""
    config: dict[str, Any] = {
        "callback_url": biz.callback_url,
        "rate_limit_per_s": biz.rate_limit_per_s,
        "burst": biz.burst,
        "max_concurrency": biz.max_concurrency,
        "timeout_ms": biz.timeout_ms,
        "retry": biz.retry.to_dict(),
        "signing_secret": biz.signing_secret,
        "paused": biz.paused,
        "registration_rate_per_s": biz.registration_rate_per_s,
        "registration_burst": biz.registration_burst,
    }
    return {name: value for name, value in config.items() if value is not None}


def biz_from_config(
    biz_type: str, config: BizTypeIn, now_ms: int, existing: BizType | None
) -> BizType:
    """The `BizType` a write of `config` stores. Every write moves `updated_at` on, so it
    names the version: a conditional write goes only over the version it read. A
    rotation in progress goes on while the secret stays the same (`BizType.replaced_by`)."""
    version_at = now_ms if existing is None else max(now_ms, existing.updated_at + 1)
    biz = BizType(
        biz_type=biz_type,
        callback_url=config.callback_url,
        rate_limit_per_s=config.rate_limit_per_s,
        burst=config.burst,
        max_concurrency=config.max_concurrency,
        timeout_ms=config.timeout_ms,
        retry=RetryPolicy(**config.retry.model_dump()),
        signing_secret=config.signing_secret,
        paused=config.paused,
        registration_rate_per_s=config.registration_rate_per_s,
        registration_burst=registration_burst(config),
        created_at=now_ms if existing is None else existing.created_at,
        updated_at=version_at,
    )
    return biz if existing is None else existing.replaced_by(biz, now_ms)
