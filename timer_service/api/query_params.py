"""Query parameters an operation does not take are refused (422 naming them), not
ignored: `GET /v1/jobs?statee=dead` listing every job is how a typo goes unseen."""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from timer_service.api.bodies import invalid

UNKNOWN_QUERY = "is not a query parameter of this operation (misspelt?); unknown ones are refused"

_known_by_route: dict[int, frozenset[str]] = {}


def query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters an operation reads, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= query_names(sub)
    return frozenset(names)


def known_query(route: APIRoute) -> frozenset[str]:
    known = _known_by_route.get(id(route))
    if known is None:
        known = _known_by_route[id(route)] = query_names(route.dependant)
    return known


async def refuse_unknown_query(request: Request) -> None:
    """A router dependency: 422 with one error per unknown parameter, before the
    operation runs. An operation that takes no query parameters ignores them, as
    caches and probes may add some. Async, so that it runs on the event loop, not in
    FastAPI's thread pool."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    known = known_query(route)
    if not known:
        return
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        raise invalid([{"loc": ["query", name], "msg": UNKNOWN_QUERY} for name in unknown])
