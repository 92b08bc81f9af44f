"""Structured logs: one JSON object per line, fields from `extra=`, and on every line
logged while handling an API request its id, and while working in a trace (an API
request with a trace context, a callback attempt of a traced job) the trace's id, so
log lines join the trace (docs/operations.md, "Traces"). No terminal colours: uvicorn's
`color_message` copy is dropped and ANSI escapes are taken out of text."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from timer_service.tracecontext import parse_traceparent

# Set by the API's middleware for the time of one request; tasks started meanwhile
# inherit it (asyncio copies the context), so their lines carry it too.
current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)
# Set by `log_trace` around work done in a trace; inherited the same way.
current_trace_id: ContextVar[str | None] = ContextVar("current_trace_id", default=None)

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()) | {
    "message",
    "asctime",
    "taskName",
}

# Never logged, whatever a caller passes (no secrets, tokens or payloads).
_REDACTED = {
    "payload",
    "signing_secret",
    "previous_signing_secret",
    "token",
    "api_token",
    "authorization",
    "secret",
}
# Never logged: uvicorn's copy of the message with terminal colours, for its own formatter.
_DROPPED = {"color_message"}
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def _plain(value: Any) -> Any:
    return _ANSI_ESCAPE.sub("", value) if isinstance(value, str) and "\x1b" in value else value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": _plain(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key in _DROPPED or key.startswith("_"):
                continue
            entry[key] = "[redacted]" if key.lower() in _REDACTED else _plain(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class ContextFilter(logging.Filter):
    """Puts the current request's id on each record as `request_id` and the current
    trace's id as `trace_id` (neither outside a request or a trace)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
        trace_id = current_trace_id.get()
        if trace_id is not None and not hasattr(record, "trace_id"):
            record.trace_id = trace_id
        return True


@contextmanager
def log_trace(traceparent: str | None) -> Iterator[None]:
    """Lines logged inside (and in tasks started inside) carry the trace id of
    `traceparent`; none when it is absent or malformed."""
    parent = parse_traceparent(traceparent)
    token = current_trace_id.set(None if parent is None else parent.trace_id)
    try:
        yield
    finally:
        current_trace_id.reset(token)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiormq", "aio_pika", "pymongo", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
