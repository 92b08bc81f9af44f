"""W3C Trace Context headers: what is kept, what is ignored (never an error)."""

from __future__ import annotations

import pytest

from timer_service.tracecontext import (
    MAX_TRACESTATE_CHARS,
    TraceContext,
    TraceParent,
    new_span_id,
    parse_traceparent,
    parse_tracestate,
    trace_context,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


def test_a_valid_traceparent_is_read_field_by_field() -> None:
    parent = parse_traceparent(VALID)
    assert parent == TraceParent(TRACE_ID, PARENT_ID, "01"), f"got {parent}"
    assert parent is not None and parent.sampled and str(parent) == VALID


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        VALID.upper(),  # hex must be lowercase
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version 255 is invalid
        f"00-{TRACE_ID}-{PARENT_ID}-01-extra",  # version 00 has exactly 4 fields
        f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID}-1",
        f"00_{TRACE_ID}_{PARENT_ID}_01",
        f"00-{TRACE_ID}-{PARENT_ID}-0g",
        f"01-{TRACE_ID}-{PARENT_ID}-01x",  # a later version's 5th field follows a dash
        "00-" + "é" * 32 + f"-{PARENT_ID}-01",
    ],
)
def test_a_malformed_traceparent_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None, f"expected {value!r} to be ignored"


def test_a_later_version_is_read_as_00_with_its_first_four_fields() -> None:
    parent = parse_traceparent(f"cc-{TRACE_ID}-{PARENT_ID}-01-what-the-future-holds")
    assert parent == TraceParent(TRACE_ID, PARENT_ID, "01"), f"got {parent}"
    assert str(parent) == VALID


def test_child_keeps_trace_and_flags_with_a_new_span() -> None:
    parent = parse_traceparent(f"00-{TRACE_ID}-{PARENT_ID}-00")
    assert parent is not None and not parent.sampled
    assert parent.child("1111111111111111") == f"00-{TRACE_ID}-1111111111111111-00"


def test_span_ids_are_random_valid_and_not_zero() -> None:
    ids = {new_span_id() for _ in range(1000)}
    assert len(ids) == 1000, "span ids repeat"
    for span_id in ids:
        assert parse_traceparent(f"00-{TRACE_ID}-{span_id}-01") is not None, span_id


def test_tracestate_members_are_kept_in_order_without_empty_ones() -> None:
    value = "rojo=00f067aa0ba902b7, ,congo=t61rcWkgMzE,tenant@vendor=x y"
    assert parse_tracestate(value) == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,tenant@vendor=x y"


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        " , ",
        "Upper=1",  # keys are lowercase
        "a=1,a=2",  # a key appears once
        "a=b=c",  # '=' is not a value character
        "a=1\n",  # nor a control character
        "a=x\ty",  # nor a tab inside a value
        ",".join(f"k{i}=v" for i in range(33)),  # at most 32 members
        "a=" + "x" * MAX_TRACESTATE_CHARS,  # longer than we keep
    ],
)
def test_a_malformed_tracestate_is_dropped_whole(value: str | None) -> None:
    assert parse_tracestate(value) is None, f"expected {value!r} to be dropped"


def test_request_headers_give_a_context_only_with_one_valid_traceparent() -> None:
    assert trace_context([VALID], []) == TraceContext(VALID, None)
    assert trace_context([VALID], ["a=1", "b=2"]) == TraceContext(VALID, "a=1,b=2")
    assert trace_context([VALID], ["A=1"]) == TraceContext(VALID, None), "bad state: parent kept"
    assert trace_context([], ["a=1"]) is None, "a tracestate alone means nothing"
    assert trace_context([VALID, VALID], []) is None, "two traceparent headers are invalid"
    assert trace_context(["nope"], ["a=1"]) is None
