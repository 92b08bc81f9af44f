import json
import logging

from timer_service.logs import JsonFormatter


def record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("broker.lane", logging.INFO, __file__, 1, msg, (), None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_one_json_object_per_line_with_the_job_identity() -> None:
    line = JsonFormatter().format(record("callback failed", biz_type="orders", job_id="o-1"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["event"] == "callback failed" and entry["level"] == "info"
    assert entry["biz_type"] == "orders" and entry["job_id"] == "o-1"
    assert entry["ts"].endswith("Z")


def test_secrets_tokens_and_payloads_never_reach_the_log() -> None:
    line = JsonFormatter().format(
        record("oops", payload={"card": "4111"}, signing_secret="s3cret", api_token="t0k")
    )
    assert "4111" not in line and "s3cret" not in line and "t0k" not in line
    entry = json.loads(line)
    assert entry["payload"] == entry["signing_secret"] == entry["api_token"] == "[redacted]"


def test_exceptions_are_kept_on_the_same_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exc"]
