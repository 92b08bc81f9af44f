"""The registration quota's token bucket, on injected time."""

from __future__ import annotations

import pytest

from timer_service.model import BizType
from timer_service.quota import OverQuota, RegistrationQuota

NOW = 1_767_225_600_000


def biz(name: str = "orders", rate: float | None = 10.0, burst: int | None = 5) -> BizType:
    return BizType(name, "http://x/", registration_rate_per_s=rate, registration_burst=burst)


def refusal(
    quota: RegistrationQuota, counts: dict[str, int], configs: dict[str, BizType], at: int
) -> OverQuota:
    with pytest.raises(OverQuota) as refused:
        quota.admit(counts, configs, at)
    return refused.value


def test_the_bucket_starts_full_and_refills_at_the_rate() -> None:
    quota, configs = RegistrationQuota(), {"orders": biz(rate=10.0, burst=5)}
    for _ in range(5):
        quota.admit({"orders": 1}, configs, NOW)
    refused = refusal(quota, {"orders": 1}, configs, NOW)
    assert (refused.biz_type, refused.retry_after_s) == ("orders", 1), vars(refused)
    quota.admit({"orders": 1}, configs, NOW + 100)  # 10/s: one token per 100 ms
    refusal(quota, {"orders": 1}, configs, NOW + 150)
    quota.admit({"orders": 1}, configs, NOW + 200)


def test_over_any_window_at_most_burst_plus_rate_times_window() -> None:
    quota, configs = RegistrationQuota(), {"orders": biz(rate=50.0, burst=20)}
    accepted = 0
    for ms in range(0, 10_000, 5):  # asks every 5 ms for 10 s: 2,000 asks
        try:
            quota.admit({"orders": 1}, configs, NOW + ms)
            accepted += 1
        except OverQuota:
            pass
    expected = 20 + 50 * 10
    assert expected - 1 <= accepted <= expected, f"expected about {expected}, got {accepted}"


def test_a_batch_larger_than_the_burst_passes_on_a_full_bucket_and_owes_the_rest() -> None:
    quota, configs = RegistrationQuota(), {"orders": biz(rate=10.0, burst=5)}
    quota.admit({"orders": 25}, configs, NOW)  # takes 25 of 5: owes 20 (2 s)
    refused = refusal(quota, {"orders": 1}, configs, NOW + 1000)
    assert refused.retry_after_s == 2, (
        f"expected 2 s until a token (21 owed at 10/s), got {refused.retry_after_s}"
    )
    quota.admit({"orders": 1}, configs, NOW + 2100)


def test_a_request_of_two_biz_types_takes_from_both_or_from_neither() -> None:
    quota = RegistrationQuota()
    configs = {"a": biz("a", rate=1.0, burst=3), "b": biz("b", rate=1.0, burst=1)}
    quota.admit({"b": 1}, configs, NOW)
    refused = refusal(quota, {"a": 2, "b": 1}, configs, NOW)
    assert refused.biz_type == "b", vars(refused)
    quota.admit({"a": 3}, configs, NOW)  # a's tokens were not taken by the refused request


def test_unlimited_and_unknown_biz_types_are_never_refused() -> None:
    quota = RegistrationQuota()
    configs = {"free": biz("free", rate=None, burst=None)}
    quota.admit({"free": 100_000, "unknown": 100_000}, configs, NOW)


def test_a_new_config_resizes_the_bucket_and_null_lifts_the_quota() -> None:
    quota = RegistrationQuota()
    quota.admit({"orders": 5}, {"orders": biz(rate=10.0, burst=5)}, NOW)
    refusal(quota, {"orders": 1}, {"orders": biz(rate=10.0, burst=5)}, NOW)
    quota.admit({"orders": 1000}, {"orders": biz(rate=None, burst=None)}, NOW)
    # Limited again: a fresh, full bucket of the new size.
    quota.admit({"orders": 2}, {"orders": biz(rate=1.0, burst=2)}, NOW)
    refusal(quota, {"orders": 1}, {"orders": biz(rate=1.0, burst=2)}, NOW)


def test_without_a_burst_one_second_of_the_rate_is_taken_at_once() -> None:
    quota, configs = RegistrationQuota(), {"orders": biz(rate=2.5, burst=None)}
    quota.admit({"orders": 3}, configs, NOW)
    refusal(quota, {"orders": 1}, configs, NOW)
