"""Query filters, projections and sorts with MongoDB's semantics (the operators the
adapter uses; any other raises NotImplementedError naming it)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from bson.regex import Regex

from tests.sim.fakemongo.values import MISSING, Doc, compare, equal, resolve, type_rank

Check = Callable[[list[Any], list[Any], Any], bool]


def matches(doc: Doc, query: Doc) -> bool:
    for key, cond in query.items():
        if key == "$or":
            if not any(matches(doc, q) for q in cond):
                return False
        elif key == "$and":
            if not all(matches(doc, q) for q in cond):
                return False
        elif key == "$nor":
            if any(matches(doc, q) for q in cond):
                return False
        elif key.startswith("$"):
            raise NotImplementedError(f"fake MongoDB: query operator {key} is not supported")
        elif not field_matches(doc, key, cond):
            return False
    return True


def is_operator_doc(cond: Any) -> bool:
    return isinstance(cond, dict) and bool(cond) and all(k.startswith("$") for k in cond)


def field_matches(doc: Doc, path: str, cond: Any) -> bool:
    reached = list(resolve(doc, path.split(".")))
    # A leaf array is matched as a whole and element by element (not deeper).
    candidates = [c for v in reached for c in ([v, *v] if isinstance(v, list) else [v])]
    if not is_operator_doc(cond):
        return _eq(candidates, cond)
    options = cond.get("$options", "")
    for op, arg in cond.items():
        if op == "$options":
            continue
        check = _OPERATORS.get(op)
        if check is None:
            raise NotImplementedError(f"fake MongoDB: query operator {op} is not supported")
        if op == "$regex":
            arg = (arg, options)
        if not check(reached, candidates, arg):
            return False
    return True


def _eq(candidates: list[Any], value: Any) -> bool:
    if isinstance(value, Regex | re.Pattern):
        return _regex(candidates, (value, ""))
    if value is None:
        return any(c is None or c is MISSING for c in candidates)
    return any(c is not MISSING and equal(c, value) for c in candidates)


def _in(candidates: list[Any], values: Any) -> bool:
    if not isinstance(values, list):
        raise ValueError("$in needs an array")
    return any(_eq(candidates, v) for v in values)


def _ordered(test: Callable[[int], bool]) -> Check:
    def check(reached: list[Any], candidates: list[Any], value: Any) -> bool:
        if value is None:  # $gte/$lte null match null and missing; $gt/$lt nothing
            return test(0) and any(c is None or c is MISSING for c in candidates)
        rank = type_rank(value)
        return any(
            c is not MISSING and type_rank(c) == rank and test(compare(c, value))
            for c in candidates
        )

    return check


def _regex(candidates: list[Any], arg: tuple[Any, str]) -> bool:
    pattern, options = arg
    if isinstance(pattern, Regex):
        pattern = pattern.try_compile()
    flags = 0
    for letter in options:
        flags |= {"i": re.I, "m": re.M, "s": re.S, "x": re.X}[letter]
    compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
    return any(isinstance(c, str) and compiled.search(c) for c in candidates)


def _not(reached: list[Any], candidates: list[Any], cond: Any) -> bool:
    if isinstance(cond, Regex | re.Pattern):
        return not _regex(candidates, (cond, ""))
    if not is_operator_doc(cond):
        raise ValueError("$not needs an operator expression or a regex")
    return not all(
        _OPERATORS[op](
            reached, candidates, (arg, cond.get("$options", "")) if op == "$regex" else arg
        )
        for op, arg in cond.items()
        if op != "$options"
    )


def _all(reached: list[Any], candidates: list[Any], values: Any) -> bool:
    return bool(values) and all(_eq(candidates, v) for v in values)


def _elem_match(reached: list[Any], candidates: list[Any], cond: Any) -> bool:
    for value in reached:
        if not isinstance(value, list):
            continue
        for element in value:
            if is_operator_doc(cond) and not any(k in ("$and", "$or", "$nor") for k in cond):
                if field_matches({"e": element}, "e", cond):
                    return True
            elif isinstance(element, dict) and matches(element, cond):
                return True
    return False


_OPERATORS: dict[str, Check] = {
    "$eq": lambda r, c, v: _eq(c, v),
    "$ne": lambda r, c, v: not _eq(c, v),
    "$in": lambda r, c, v: _in(c, v),
    "$nin": lambda r, c, v: not _in(c, v),
    "$gt": _ordered(lambda x: x > 0),
    "$gte": _ordered(lambda x: x >= 0),
    "$lt": _ordered(lambda x: x < 0),
    "$lte": _ordered(lambda x: x <= 0),
    "$exists": lambda r, c, v: any(x is not MISSING for x in r) == bool(v),
    "$regex": lambda r, c, v: _regex(c, v),
    "$not": _not,
    "$all": _all,
    "$elemMatch": _elem_match,
    "$size": lambda r, c, v: any(isinstance(x, list) and len(x) == v for x in r),
}


# -- projections ---------------------------------------------------------------------------


def project(doc: Doc, projection: Doc | Sequence[str] | None) -> Doc:
    """The fields a projection keeps: inclusion (`_id` kept unless excluded) or
    exclusion, top-level or dotted."""
    if projection is None:
        return doc
    if not isinstance(projection, dict):
        projection = dict.fromkeys(projection, 1)
    for value in projection.values():
        if isinstance(value, dict) or isinstance(value, str):
            raise NotImplementedError("fake MongoDB: projection expressions are not supported")
    spec = {k: bool(v) for k, v in projection.items()}
    keep_id = spec.pop("_id", True)
    if spec and len(set(spec.values())) > 1:
        raise ValueError("a projection cannot both include and exclude fields")
    including = any(spec.values())
    if including:
        out: Doc = {}
        if keep_id and "_id" in doc:
            out["_id"] = doc["_id"]
        for key, value in doc.items():
            wanted = [p[len(key) + 1 :] for p in spec if p.startswith(key + ".")]
            if key in spec:
                out[key] = value
            elif wanted and isinstance(value, dict):
                out[key] = project(value, dict.fromkeys(wanted, 1) | {"_id": 0})
        return out
    out = {k: v for k, v in doc.items() if not (k == "_id" and not keep_id)}
    for path in spec:
        head, _, rest = path.partition(".")
        if not rest:
            out.pop(head, None)
        elif isinstance(out.get(head), dict):
            out[head] = project(out[head], {rest: 0})
    return out


# -- sorts ---------------------------------------------------------------------------------


def sort_spec(key: Any, direction: Any = None) -> list[tuple[str, int]]:
    """PyMongo's sort arguments as a list of (path, 1 | -1)."""
    if isinstance(key, str):
        return [(key, 1 if direction is None else int(direction))]
    if isinstance(key, dict):
        return [(k, int(v)) for k, v in key.items()]
    return [(k, int(v)) for k, v in key]


def sorted_docs(docs: list[Doc], spec: list[tuple[str, int]]) -> list[Doc]:
    """Stable, by the spec's keys; an array sorts by its least (ascending) or greatest
    (descending) element, a missing field as null."""
    out = list(docs)
    for path, direction in reversed(spec):

        def key(doc: Doc, path: str = path, direction: int = direction) -> Any:
            from tests.sim.fakemongo.values import sort_key

            values = [
                e
                for v in resolve(doc, path.split("."))
                for e in (v if isinstance(v, list) and v else [v])
            ]
            values = [None if v is MISSING else v for v in values]
            chosen = min(values, key=sort_key) if direction > 0 else max(values, key=sort_key)
            return sort_key(chosen)

        out.sort(key=key, reverse=direction < 0)
    return out
