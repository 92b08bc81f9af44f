"""Each /v1 route declares the role it needs and where its biz type comes from, once:
`requires(Role.PRODUCER, biz_from="path")` as a dependency. `create_app` refuses to
build an app with a /v1 route that declares none, so no route is open by omission
(docs/api.md, "Access control").

`biz_from`: "path" checks the `{biz_type}` path parameter; "query" checks the
`biz_type` filter when one is given (the handler then shows only the biz types the
token covers); "body" leaves the check to the handler, which reads the body first;
"none" for routes that span no biz type of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from timer_service.access import Grant, Role
from timer_service.api.problems import FORBIDDEN, Problem
from timer_service.model import BizType, business_biz_types
from timer_service.store.ports.biz_types import BizTypesPort

BizFrom = Literal["path", "query", "body", "none"]
OPEN_GRANT = Grant("anonymous", Role.ADMIN)  # the caller when the API asks for no token


def grant_of(request: Request) -> Grant:
    """The caller's grant, put on the request by `BearerAuthMiddleware`."""
    return cast(Grant, getattr(request.state, "grant", OPEN_GRANT))


def forbidden(detail: str) -> Problem:
    return Problem(403, detail, type_=FORBIDDEN)


def check_role(grant: Grant, role: Role) -> None:
    if not grant.allows(role):
        raise forbidden(
            f"Token {grant.name!r} ({grant.role.value}) may not do this: it needs {role.value}."
        )


def check_biz_type(grant: Grant, biz_type: str) -> None:
    if not grant.covers(biz_type):
        raise forbidden(f"Token {grant.name!r} does not cover biz type {biz_type!r}.")


@dataclass(frozen=True)
class Requirement:
    """A route's declared role and biz type source; as a dependency, the caller's grant
    once both are checked (403 otherwise, before the handler changes anything)."""

    role: Role
    biz_from: BizFrom
    every_biz_type: bool = False  # the grant must cover every biz type (token management)

    async def __call__(self, request: Request) -> Grant:
        grant = grant_of(request)
        check_role(grant, self.role)
        if self.every_biz_type and not grant.unrestricted:
            raise forbidden(f"Token {grant.name!r} covers some biz types only.")
        if self.biz_from == "path":
            check_biz_type(grant, str(request.path_params.get("biz_type", "")))
        elif self.biz_from == "query":
            wanted = request.query_params.get("biz_type")
            if wanted is not None:
                check_biz_type(grant, wanted)
        return grant


def requires(role: Role, biz_from: BizFrom = "none", *, every_biz_type: bool = False) -> Any:
    """The dependency that declares a route's access: in the route's `dependencies`, or
    as a `grant` parameter (`Annotated[Grant, requires(...)]`)."""
    return Depends(Requirement(role, biz_from, every_biz_type))


def requirement_of(route: APIRoute) -> Requirement | None:
    """The route's declared `Requirement`, wherever in its dependencies it is."""
    pending: list[Dependant] = [route.dependant]
    while pending:
        dependant = pending.pop()
        if isinstance(dependant.call, Requirement):
            return dependant.call
        pending.extend(dependant.dependencies)
    return None


def check_declared(routes: list[APIRoute], prefix: str) -> None:
    """Raise if a route under `prefix` declares no requirement."""
    missing = [
        f"{sorted(r.methods or ())} {r.path}"
        for r in routes
        if r.path.startswith(prefix) and requirement_of(r) is None
    ]
    if missing:
        raise RuntimeError(f"routes without a declared role (api/access.py): {missing}")


async def caller_grant(request: Request) -> Grant:
    """`grant_of` as a dependency: async, so FastAPI calls it on the event loop rather
    than in its thread pool (a thread hop per request for a dictionary read)."""
    return grant_of(request)


GrantDep = Annotated[Grant, Depends(caller_grant)]  # the caller's grant, for handlers that filter


async def visible_biz_types(biz_types: BizTypesPort, grant: Grant) -> list[BizType]:
    """The biz types a listing shows this caller: a business's (never the service's own,
    such as the canary's), within the caller's grant."""
    business = business_biz_types(await biz_types.list_biz_types())
    return grant.visible(business, lambda b: b.biz_type)
