"""/problems/{kind}: what each problem `type` means, so that every type this API sends
resolves (against the API's own address) to its description. No auth."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from timer_service.api.docs import problems
from timer_service.api.problems import PROBLEM_DESCRIPTIONS, PROBLEMS_PATH, Problem


class ProblemTypeOut(BaseModel):
    type: str
    description: str


router = APIRouter(tags=["health"])


@router.get(
    PROBLEMS_PATH + "{kind}",
    summary="What a problem type means",
    response_model=ProblemTypeOut,
    responses=problems(404),
)
async def get_problem_type(kind: str) -> Response:
    type_ = PROBLEMS_PATH + kind
    description = PROBLEM_DESCRIPTIONS.get(type_)
    if description is None:
        raise Problem(404, f"No problem type {type_!r}.")
    return JSONResponse({"type": type_, "description": description})
