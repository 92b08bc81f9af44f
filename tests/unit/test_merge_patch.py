"""`merge_patch` against the examples of RFC 7396, appendix A."""

from __future__ import annotations

from typing import Any

import pytest

from timer_service.api.merge_patch import merge_patch

RFC_7396_APPENDIX_A = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC_7396_APPENDIX_A)
def test_the_rfc_examples(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


def test_neither_input_changes() -> None:
    target = {"retry": {"max_attempts": 3, "multiplier": 2.0}, "paused": False}
    patch = {"retry": {"multiplier": None}, "paused": True}

    merge_patch(target, patch)

    assert target == {"retry": {"max_attempts": 3, "multiplier": 2.0}, "paused": False}
    assert patch == {"retry": {"multiplier": None}, "paused": True}
