"""Notebooks: start (or start again), list, read, stop. The logic is ``kiban.services.notebooks``;
the notebooks themselves are reached at ``/nb/<tenant>/<name>/`` (``kiban.web.notebook_proxy``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from kiban.api import responses
from kiban.api.deps import PlatformDep, PrincipalDep, SessionDep, SessionRoute
from kiban.api.notebook_schemas import NotebookOut, notebook_out
from kiban.api.params import TOKEN
from kiban.domain.notebook import NotebookRequest
from kiban.services import notebooks

router = APIRouter(
    prefix="/api/v1/notebooks", tags=["notebooks"], dependencies=TOKEN, route_class=SessionRoute
)


@router.post(
    "",
    response_model=NotebookOut,
    status_code=201,
    responses={
        **responses.SUBMIT,
        400: responses.UNREADABLE,
        201: {"model": NotebookOut, "description": "started"},
    },
)
def start_notebook(
    body: NotebookRequest, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> Response:
    """Start a notebook (JupyterLab as an interactive job), or start a stopped one again with
    its directory as it was; one already starting or running is returned as it is."""
    row = notebooks.start(
        session,
        principal,
        body,
        home=platform.home,
        executor=platform.executor,
        facts=platform.facts,
        policy=platform.policy,
        at=platform.clock.now(),
        fields_set=frozenset(body.model_fields_set),
    )
    session.commit()
    platform.loop.wake()
    out = notebook_out(row).model_dump_json(by_alias=True)
    return Response(out, status_code=201, media_type="application/json")


@router.get("", response_model=list[NotebookOut], responses=responses.READ)
def list_notebooks(principal: PrincipalDep, session: SessionDep) -> list[NotebookOut]:
    """The caller's notebooks (an admin's: everyone's)."""
    return [notebook_out(row) for row in notebooks.list_notebooks(session, principal)]


@router.get("/{name}", response_model=NotebookOut, responses=responses.READ_ONE)
def get_notebook(name: str, principal: PrincipalDep, session: SessionDep) -> NotebookOut:
    """One of the caller's notebooks (404 for anyone else's)."""
    return notebook_out(notebooks.get_visible(session, principal, name))


@router.post("/{name}/stop", response_model=NotebookOut, responses=responses.READ_ONE)
def stop_notebook(
    name: str, platform: PlatformDep, principal: PrincipalDep, session: SessionDep
) -> NotebookOut:
    """Stop the notebook: its job stops and its GPUs are released; its directory is kept."""
    row = notebooks.stop(session, principal, name, platform.clock.now())
    session.commit()
    platform.loop.wake()
    return notebook_out(row)
