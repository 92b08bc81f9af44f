import asyncio
import json
import logging

import pytest

from timer_service.logs import ContextFilter, JsonFormatter, log_trace


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


# -- no terminal colours in JSON -----------------------------------------------------

ANSI_BOLD = "\x1b[1m"
ANSI_RESET = "\x1b[0m"


def test_uvicorns_coloured_copy_of_the_message_is_not_logged() -> None:
    # uvicorn passes a copy with ANSI escapes for its own coloured formatter
    coloured = f"Uvicorn running on {ANSI_BOLD}http://127.0.0.1:8080{ANSI_RESET}"
    line = JsonFormatter().format(
        record("Uvicorn running on http://127.0.0.1:8080", color_message=coloured)
    )
    entry = json.loads(line)
    assert "color_message" not in entry, entry
    assert "\x1b" not in line and "\\u001b" not in line, line
    assert entry["event"] == "Uvicorn running on http://127.0.0.1:8080"


def test_ansi_escapes_are_stripped_from_the_event_and_text_fields() -> None:
    line = JsonFormatter().format(
        record(f"{ANSI_BOLD}started{ANSI_RESET}", detail="\x1b[31mred\x1b[0m", attempt=2)
    )
    entry = json.loads(line)
    assert (entry["event"], entry["detail"], entry["attempt"]) == ("started", "red", 2), entry


# -- trace ids -----------------------------------------------------------------------

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def logged(msg: str) -> dict[str, object]:
    """`msg` as the processes' handler writes it (the context filter, then JSON)."""
    rec = record(msg)
    assert ContextFilter().filter(rec)
    entry: dict[str, object] = json.loads(JsonFormatter().format(rec))
    return entry


def test_lines_logged_in_a_trace_carry_its_id_and_only_those() -> None:
    assert "trace_id" not in logged("before")
    with log_trace(TRACEPARENT):
        assert logged("inside")["trace_id"] == TRACE_ID
        with log_trace(None):
            assert "trace_id" not in logged("no trace here")
        assert logged("inside again")["trace_id"] == TRACE_ID
    assert "trace_id" not in logged("after"), "the trace id leaked out"


@pytest.mark.parametrize("traceparent", [None, "", "00-garbage", TRACEPARENT.upper()])
def test_no_or_a_malformed_traceparent_gives_no_trace_id(traceparent: str | None) -> None:
    with log_trace(traceparent):
        assert "trace_id" not in logged("x")


async def test_a_task_started_in_a_trace_logs_its_id() -> None:
    async def child() -> dict[str, object]:
        return logged("in a task")

    with log_trace(TRACEPARENT):
        task = asyncio.create_task(child())
    assert (await task)["trace_id"] == TRACE_ID
