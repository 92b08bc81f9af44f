"""Update documents and pipelines, replacements and upsert seeds, with MongoDB's
semantics for the operators the adapter uses; any other raises NotImplementedError."""

from __future__ import annotations

import itertools
from typing import Any

from bson import ObjectId

from tests.sim.fakemongo.expressions import Context, run_pipeline
from tests.sim.fakemongo.query import is_operator_doc, matches
from tests.sim.fakemongo.values import MISSING, Doc, compare, equal, get_path, type_rank

# Codes of the server's write errors (mongo/base/error_codes.yml).
BAD_VALUE = 2
TYPE_MISMATCH = 14
PATH_NOT_VIABLE = 28
CONFLICTING_UPDATE_OPERATORS = 40
IMMUTABLE_FIELD = 66


class UpdateFailure(Exception):
    """A write error the server answers for one statement."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_UPDATE_OPERATORS = (
    "$set",
    "$unset",
    "$inc",
    "$push",
    "$addToSet",
    "$pull",
    "$max",
    "$min",
    "$setOnInsert",
    "$currentDate",
)
_PIPELINE_STAGES = ("$set", "$addFields", "$unset", "$project")


def is_pipeline(update: Any) -> bool:
    return isinstance(update, list)


def check_update(update: Any) -> None:
    """What PyMongo and the server refuse before anything is applied."""
    if is_pipeline(update):
        for stage in update:
            name = next(iter(stage))
            if name not in _PIPELINE_STAGES:
                raise NotImplementedError(f"fake MongoDB: pipeline update stage {name}")
        return
    if not isinstance(update, dict) or not update:
        raise ValueError("update cannot be empty")
    for op in update:
        if not op.startswith("$"):
            raise ValueError("update only works with $ operators")
        if op not in _UPDATE_OPERATORS:
            raise NotImplementedError(f"fake MongoDB: update operator {op} is not supported")
    paths = sorted(path for fields in update.values() for path in fields)
    for a, b in itertools.pairwise(paths):
        if a == b or b.startswith(a + "."):
            raise UpdateFailure(
                CONFLICTING_UPDATE_OPERATORS,
                f"Updating the path '{b}' would create a conflict at '{a}'",
            )


def check_replacement(doc: Any) -> None:
    if any(k.startswith("$") for k in doc):
        raise ValueError("replacement can not include $ operators")


def apply_update(doc: Doc, update: Any, ctx: Context, *, inserting: bool) -> Doc:
    """The document after `update` (a new dict; `doc` is left as it was)."""
    if is_pipeline(update):
        (out,) = run_pipeline([doc], update, ctx)
    else:
        out = _copy_containers(doc)
        steps = sorted(
            ((path, op, arg) for op, fields in update.items() for path, arg in fields.items()),
            key=lambda step: step[0],
        )
        for path, op, arg in steps:
            _apply_one(out, path, op, arg, ctx, inserting)
    if "_id" in doc and not equal(out.get("_id", MISSING), doc["_id"]):
        raise UpdateFailure(
            IMMUTABLE_FIELD,
            "Performing an update on the path '_id' would modify the immutable field '_id'",
        )
    return out


def _copy_containers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_containers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_containers(v) for v in value]
    return value


def _apply_one(doc: Doc, path: str, op: str, arg: Any, ctx: Context, inserting: bool) -> None:
    current = get_path(doc, path)
    if op == "$set":
        _set(doc, path, arg)
    elif op == "$setOnInsert":
        if inserting:
            _set(doc, path, arg)
    elif op == "$unset":
        _unset(doc, path)
    elif op == "$inc":
        if type_rank(arg) != 2 or isinstance(arg, bool):
            raise UpdateFailure(TYPE_MISMATCH, f"Cannot increment with non-numeric argument: {arg}")
        if current is MISSING:
            _set(doc, path, arg)
        elif type_rank(current) != 2 or isinstance(current, bool):
            raise UpdateFailure(
                TYPE_MISMATCH, f"Cannot apply $inc to a value of non-numeric type ({path})"
            )
        else:
            _set(doc, path, current + arg)
    elif op == "$push":
        items = [arg]
        keep: int | None = None  # `$slice`: the first n (n >= 0) or the last -n
        if isinstance(arg, dict) and "$each" in arg:
            if not set(arg) <= {"$each", "$slice"}:
                raise NotImplementedError("fake MongoDB: $push modifiers besides $each, $slice")
            items = list(arg["$each"])
            keep = arg.get("$slice")
        if current is MISSING:
            current = []
            _set(doc, path, current)
        elif not isinstance(current, list):
            raise UpdateFailure(BAD_VALUE, f"The field '{path}' must be an array")
        current.extend(items)
        if keep is not None:
            current[:] = current[:keep] if keep >= 0 else current[keep:]
    elif op == "$addToSet":
        items = list(arg["$each"]) if isinstance(arg, dict) and "$each" in arg else [arg]
        if isinstance(arg, dict) and "$each" in arg and set(arg) != {"$each"}:
            raise NotImplementedError("fake MongoDB: $addToSet modifiers besides $each")
        if current is MISSING:
            current = []
            _set(doc, path, current)
        elif not isinstance(current, list):
            raise UpdateFailure(BAD_VALUE, f"Cannot apply $addToSet to non-array field '{path}'")
        for item in items:
            if not any(equal(item, have) for have in current):
                current.append(item)
    elif op == "$pull":
        if current is MISSING:
            return
        if not isinstance(current, list):
            raise UpdateFailure(BAD_VALUE, "Cannot apply $pull to a non-array value")
        current[:] = [item for item in current if not _pulls(item, arg)]
    elif op in ("$max", "$min"):
        c = 1 if current is MISSING else compare(arg, current)
        if current is MISSING or (c > 0 if op == "$max" else c < 0):
            _set(doc, path, arg)
    elif op == "$currentDate":
        if arg is not True and arg != {"$type": "date"}:
            raise NotImplementedError("fake MongoDB: $currentDate as a timestamp")
        _set(doc, path, ctx.now)


def _pulls(item: Any, condition: Any) -> bool:
    """Whether `$pull: {path: condition}` removes `item`: a condition of operators is
    matched against the item itself, a document as a query of the item's fields, any
    other value by equality."""
    if is_operator_doc(condition):
        return matches({"item": item}, {"item": condition})
    if isinstance(condition, dict) and isinstance(item, dict):
        return matches(item, condition)
    return equal(item, condition)


def _parent(doc: Doc, path: str, create: bool) -> tuple[Any, str]:
    parts = path.split(".")
    node: Any = doc
    for part in parts[:-1]:
        if isinstance(node, list) and part.isdigit():
            index = int(part)
            while create and len(node) <= index:
                node.append(None)
            nxt = node[index] if index < len(node) else MISSING
        elif isinstance(node, dict):
            nxt = node.get(part, MISSING)
        else:
            raise UpdateFailure(PATH_NOT_VIABLE, f"Cannot create field '{part}' in {node!r}")
        if nxt is MISSING or (nxt is None and create):
            if not create:
                return None, parts[-1]
            nxt = {}
            if isinstance(node, list):
                node[int(part)] = nxt
            else:
                node[part] = nxt
        node = nxt
    return node, parts[-1]


def _set(doc: Doc, path: str, value: Any) -> None:
    parent, last = _parent(doc, path, create=True)
    if isinstance(parent, list):
        if not last.isdigit():
            raise UpdateFailure(PATH_NOT_VIABLE, f"Cannot create field '{last}' in an array")
        while len(parent) <= int(last):
            parent.append(None)
        parent[int(last)] = value
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise UpdateFailure(PATH_NOT_VIABLE, f"Cannot create field '{last}' in {parent!r}")


def _unset(doc: Doc, path: str) -> None:
    parent, last = _parent(doc, path, create=False)
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        parent[int(last)] = None


def upsert_seed(query: Doc) -> Doc:
    """The document an upsert starts from: the query's equality conditions."""
    out: Doc = {}
    for key, cond in query.items():
        if key == "$and" or (key == "$or" and len(cond) == 1):
            for clause in cond:
                for path, value in upsert_seed(clause).items():
                    _set(out, path, value)
        elif key.startswith("$"):
            continue
        elif is_operator_doc(cond):
            if "$eq" in cond:
                _set(out, key, cond["$eq"])
        else:
            _set(out, key, cond)
    return out


def upserted(query: Doc, update: Any, ctx: Context, new_id: ObjectId, *, replacement: bool) -> Doc:
    """The document an upsert inserts: seeded from the query, `_id` first (`new_id`
    when neither gives one)."""
    if replacement:
        doc = dict(update)
        seed_id = upsert_seed(query).get("_id", MISSING)
        if "_id" not in doc and seed_id is not MISSING:
            doc = {"_id": seed_id, **doc}
    else:
        doc = apply_update(upsert_seed(query), update, ctx, inserting=True)
    if "_id" not in doc:
        doc = {"_id": new_id, **doc}
    elif next(iter(doc)) != "_id":
        doc = {"_id": doc["_id"], **{k: v for k, v in doc.items() if k != "_id"}}
    return doc
