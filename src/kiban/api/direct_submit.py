"""``POST /api/v1/jobs`` answered without FastAPI's routing and dependency solving.

Submission is the API's busiest route, and for it FastAPI's own work per request (the scan of
the routes, solving the router's dependencies, its wrappers) cost the event loop about as much
as the route did (issue 21). The route stays FastAPI's: it is in the OpenAPI document, and a
request this app does not take goes there. This app sits between admission and FastAPI's
middleware and calls the same endpoint with what FastAPI does for it: the role check of the
router's dependencies (``check_access``; the bearer dependency only documents the token), the
endpoint's own answer, an error through the app's exception handlers, a failure answered as
``ServerErrorMiddleware`` answers it. ``tests/api/test_direct_submit.py`` compares the answers.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from kiban.api.access import check_access


class DirectSubmit:
    """``route`` (an async endpoint taking the request alone, as ``submit_job``) called straight
    from here for its method and path; every other request goes on to ``app``."""

    def __init__(self, app: ASGIApp, api: FastAPI, route: APIRoute) -> None:
        self.app = app
        self.api = api
        self.route = route
        self.path = route.path
        self.methods = frozenset(route.methods or ())
        error_handler = None
        handlers = {}
        for key, value in api.exception_handlers.items():  # as FastAPI's own stack splits them
            if key in (500, Exception):
                error_handler = value
            else:
                handlers[key] = value
        self.direct = ServerErrorMiddleware(
            ExceptionMiddleware(self._answer, handlers=handlers, debug=api.debug),
            handler=error_handler,
            debug=api.debug,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == self.path
            and scope["method"] in self.methods
            and not scope.get("root_path")
            and not self.api.dependency_overrides  # a test's overrides: FastAPI solves them
        ):
            await self.direct(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self.route
        scope["endpoint"] = self.route.endpoint
        scope["path_params"] = {}
        request = Request(scope, receive, send)
        await check_access(request)
        response = await self.route.endpoint(request)
        await response(scope, receive, send)
