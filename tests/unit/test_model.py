from timer_service.model import BizType, RetryPolicy, canonical_json, same_payload


def test_backoff_follows_the_contract_formula() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_ms=1000, max_backoff_ms=600_000)
    assert [policy.backoff_ms(n) for n in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert policy.backoff_ms(20) == 600_000


def test_backoff_never_overflows() -> None:
    policy = RetryPolicy(max_attempts=1000, initial_backoff_ms=1, max_backoff_ms=5, multiplier=10.0)
    assert policy.backoff_ms(400) == 5


def test_the_jitter_only_adds_up_to_a_tenth_or_half_a_second_and_keeps_the_cap() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_ms=1000, max_backoff_ms=5000)
    assert policy.backoff_ms(1, spread=0.0) == 1000  # never earlier than the formula
    assert policy.backoff_ms(1, spread=0.5) == 1050
    assert policy.backoff_ms(2, spread=0.999) == 2199
    assert policy.backoff_ms(3, spread=0.999) == 4399
    assert policy.backoff_ms(4, spread=0.999) == 5000  # 8000 capped: the cap holds
    long = RetryPolicy(max_attempts=10, initial_backoff_ms=60_000, max_backoff_ms=600_000)
    assert long.backoff_ms(1, spread=0.999) == 60_499  # a tenth would be 6 s: at most 0.5 s
    waits = {policy.backoff_ms(1, spread=i / 100) for i in range(100)}
    assert min(waits) == 1000 and max(waits) == 1099 and len(waits) > 80  # spread out


def test_payloads_compare_as_json_values() -> None:
    assert same_payload('{"a":1,"b":2}', '{"b": 2, "a": 1}')
    assert not same_payload('{"a":1}', '{"a":1.0}')
    assert canonical_json('{"b":1,"a":[1,2]}') == '{"a":[1,2],"b":1}'


def test_a_rotation_signs_with_both_secrets_until_the_window_closes() -> None:
    biz = BizType("orders", "http://x/", signing_secret="old")
    rotating = biz.rotate_secret("new", keep_previous_ms=1000, now_ms=5000)
    assert rotating.signing_secrets(5000) == ("new", "old")
    assert rotating.signing_secrets(5999) == ("new", "old")
    assert rotating.signing_secrets(6000) == ("new",)
    assert rotating.to_public(5999)["signing_secret_rotating_until"] == 6000
    assert rotating.to_public(6000)["signing_secret_rotating_until"] is None
    public = rotating.to_public(5000)
    assert "old" not in public.values() and "new" not in public.values(), public


def test_rotating_without_a_window_or_a_secret_keeps_nothing() -> None:
    unsigned = BizType("orders", "http://x/")
    assert unsigned.signing_secrets(0) == ()
    for biz in (unsigned, BizType("orders", "http://x/", signing_secret="old")):
        rotated = biz.rotate_secret(
            "new", keep_previous_ms=0 if biz.signing_secret else 60, now_ms=1
        )
        assert rotated.previous_signing_secret is None, rotated
        assert rotated.signing_secrets(1) == ("new",)


def test_a_replacing_config_keeps_a_running_rotation_only_with_the_same_secret() -> None:
    rotating = BizType("orders", "http://x/", signing_secret="old").rotate_secret("new", 1000, 0)
    same = BizType("orders", "http://y/", signing_secret="new")
    assert rotating.replaced_by(same, 500).signing_secrets(500) == ("new", "old")
    assert rotating.replaced_by(same, 1000).signing_secrets(500) == ("new",)  # already over
    other = BizType("orders", "http://y/", signing_secret="other")
    assert rotating.replaced_by(other, 500).signing_secrets(500) == ("other",)
