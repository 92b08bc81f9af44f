from timer_service.model import RetryPolicy, canonical_json, same_payload


def test_backoff_follows_the_contract_formula() -> None:
    policy = RetryPolicy(max_attempts=10, initial_backoff_ms=1000, max_backoff_ms=600_000)
    assert [policy.backoff_ms(n) for n in (1, 2, 3, 4)] == [1000, 2000, 4000, 8000]
    assert policy.backoff_ms(20) == 600_000


def test_backoff_never_overflows() -> None:
    policy = RetryPolicy(max_attempts=1000, initial_backoff_ms=1, max_backoff_ms=5, multiplier=10.0)
    assert policy.backoff_ms(400) == 5


def test_payloads_compare_as_json_values() -> None:
    assert same_payload('{"a":1,"b":2}', '{"b": 2, "a": 1}')
    assert not same_payload('{"a":1}', '{"a":1.0}')
    assert canonical_json('{"b":1,"a":[1,2]}') == '{"a":[1,2],"b":1}'
