"""JSON Merge Patch (RFC 7396): what a PATCH of a resource's config means."""

from __future__ import annotations

from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """`target` with `patch` applied, neither changed (RFC 7396, section 2): an object
    patches member by member, `null` removes a member, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged
