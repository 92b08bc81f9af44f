"""Aggregation expressions and the aggregation stages the adapter uses (`$match`,
`$group`, `$addFields`/`$set`, `$sort`, `$limit`, `$skip`, `$project`, `$count`),
also run as pipeline updates. `$$NOW` is the fake server's clock, one value per
command, as on MongoDB."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from tests.sim.fakemongo.query import matches, project, sort_spec, sorted_docs
from tests.sim.fakemongo.values import MISSING, Doc, get_path, hashable, sort_key, type_rank


class Context:
    """What an expression may read besides the document: the command's `$$NOW`."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now


def evaluate(expr: Any, doc: Doc, ctx: Context) -> Any:
    if isinstance(expr, str) and expr.startswith("$$"):
        name = expr[2:].split(".", 1)[0]
        if name == "NOW":
            return ctx.now
        if name == "ROOT":
            return doc if expr == "$$ROOT" else get_path(doc, expr[len("$$ROOT.") :])
        raise NotImplementedError(f"fake MongoDB: variable {expr} is not supported")
    if isinstance(expr, str) and expr.startswith("$"):
        return get_path(doc, expr[1:])
    if isinstance(expr, list):
        return [evaluate(e, doc, ctx) for e in expr]
    if isinstance(expr, dict):
        if len(expr) == 1 and next(iter(expr)).startswith("$"):
            op, arg = next(iter(expr.items()))
            if op == "$literal":
                return arg
            fn = _OPERATORS.get(op)
            if fn is None:
                raise NotImplementedError(
                    f"fake MongoDB: expression operator {op} is not supported"
                )
            args = arg if isinstance(arg, list) else [arg]
            return fn([evaluate(a, doc, ctx) for a in args])
        return {k: evaluate(v, doc, ctx) for k, v in expr.items()}
    return expr


def _epoch_ms(value: dt.datetime) -> int:
    return round(value.timestamp() * 1000)


def _add(args: list[Any]) -> Any:
    if any(a is None or a is MISSING for a in args):
        return None
    dates = [a for a in args if isinstance(a, dt.datetime)]
    numbers = sum(a for a in args if not isinstance(a, dt.datetime))
    if len(dates) > 1:
        raise ValueError("$add only supports one date")
    if dates:
        return dates[0] + dt.timedelta(milliseconds=numbers)
    return numbers


def _to_long(args: list[Any]) -> Any:
    (value,) = args
    if value is None or value is MISSING:
        return None
    if isinstance(value, dt.datetime):
        return _epoch_ms(value)
    return int(value)


def _if_null(args: list[Any]) -> Any:
    for a in args[:-1]:
        if a is not None and a is not MISSING:
            return a
    return args[-1]


_OPERATORS: dict[str, Callable[[list[Any]], Any]] = {
    "$add": _add,
    "$toLong": _to_long,
    "$ifNull": _if_null,
}


# -- stages --------------------------------------------------------------------------------


def set_fields(doc: Doc, fields: Doc, ctx: Context) -> Doc:
    """`$set`/`$addFields`: top-level fields only (a nested object would merge into an
    embedded document on MongoDB; not modelled)."""
    out = dict(doc)
    for path, expr in fields.items():
        if "." in path:
            raise NotImplementedError(f"fake MongoDB: $set of a dotted path {path!r} in a pipeline")
        if isinstance(expr, dict) and not (len(expr) == 1 and next(iter(expr)).startswith("$")):
            raise NotImplementedError("fake MongoDB: an object expression in a pipeline $set")
        value = evaluate(expr, doc, ctx)
        if value is MISSING:
            out.pop(path, None)
        else:
            out[path] = value
    return out


def run_pipeline(docs: list[Doc], pipeline: list[Doc], ctx: Context) -> list[Doc]:
    for stage in pipeline:
        if len(stage) != 1:
            raise ValueError(f"a pipeline stage has exactly one field: {stage}")
        name, arg = next(iter(stage.items()))
        if name == "$match":
            docs = [d for d in docs if matches(d, arg)]
        elif name in ("$addFields", "$set"):
            docs = [set_fields(d, arg, ctx) for d in docs]
        elif name == "$unset":
            drop = [arg] if isinstance(arg, str) else arg
            docs = [project(d, dict.fromkeys(drop, 0)) for d in docs]
        elif name == "$project":
            docs = [project(d, arg) for d in docs]
        elif name == "$sort":
            docs = sorted_docs(docs, sort_spec(arg))
        elif name == "$limit":
            docs = docs[:arg]
        elif name == "$skip":
            docs = docs[arg:]
        elif name == "$count":
            docs = [{arg: len(docs)}] if docs else []
        elif name == "$group":
            docs = _group(docs, arg, ctx)
        else:
            raise NotImplementedError(f"fake MongoDB: aggregation stage {name} is not supported")
    return docs


def _group(docs: list[Doc], spec: Doc, ctx: Context) -> list[Doc]:
    accumulators = {k: v for k, v in spec.items() if k != "_id"}
    groups: dict[Any, Doc] = {}
    for doc in docs:
        key = evaluate(spec["_id"], doc, ctx)
        key = None if key is MISSING else key
        out = groups.setdefault(hashable(key), {"_id": key})
        for field, acc in accumulators.items():
            (op, expr), *more = acc.items()
            if more:
                raise ValueError(f"an accumulator has one operator: {acc}")
            value = evaluate(expr, doc, ctx)
            out[field] = _accumulate(op, out.get(field, MISSING), value)
    return list(groups.values())


def _accumulate(op: str, acc: Any, value: Any) -> Any:
    if op == "$sum":
        number = value if type_rank(value) == 2 and not isinstance(value, bool) else 0
        return number if acc is MISSING else acc + number
    if op in ("$min", "$max"):
        if value is MISSING or value is None:
            return None if acc is MISSING else acc
        if acc is MISSING or acc is None:
            return value
        better = (
            sort_key(value) < sort_key(acc) if op == "$min" else sort_key(value) > sort_key(acc)
        )
        return value if better else acc
    if op == "$first":
        return value if acc is MISSING else acc
    if op == "$last":
        return value
    if op == "$push":
        return ([] if acc is MISSING else acc) + ([] if value is MISSING else [value])
    raise NotImplementedError(f"fake MongoDB: accumulator {op} is not supported")
