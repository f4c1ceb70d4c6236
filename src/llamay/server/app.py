"""The FastAPI app: every API's routes on one address over one model registry."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import (routes_anthropic, routes_contexts, routes_embed, routes_extras, routes_gateway, routes_llamacpp,
               routes_ollama, routes_openai, routes_studio)
from .contexts import ContextTable, expire
from .guard import Guard, GuardSettings, proto_for
from .http import error_response
from .metrics import Metrics
from .peers import ContextPeers
from .registry import Registry
from .protocol.base import ProtocolError
from .requestlog import RequestLog
from .responder import Responder

REAP_EVERY_S = 5.0


def create_app(registry: Registry, guard: GuardSettings = GuardSettings(),
               log: Callable[[str], None] | None = None, peers: tuple[str, ...] = ()) -> FastAPI:
    """log: where each request's line goes (RequestLog); None: no request log. peers: the other workers
    behind the same gateway, asked for named contexts this one does not hold (peers.py)."""
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        reaper = asyncio.create_task(_reap(registry, app.state.contexts))
        lister = asyncio.create_task(registry.upstreams.keep_listed()) if registry.upstreams else None
        try:
            yield
        finally:
            reaper.cancel()
            if lister is not None:
                lister.cancel()
            await registry.upstreams.aclose()
            await asyncio.to_thread(registry.close)

    app = FastAPI(title="llamay", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    if peers:
        app.add_middleware(ContextPeers, peers=peers)  # inside the guard: a refused request goes nowhere
    app.add_middleware(Guard, settings=guard)  # Host, Origin, API key and body type: every route
    if log is not None:
        app.add_middleware(RequestLog, write=log)  # outermost: refused requests are logged too
    app.state.guard = guard
    app.state.registry = registry
    app.state.responder = Responder(registry, Metrics())
    app.state.contexts = ContextTable(registry.settings.max_contexts, registry.settings.context_ttl)
    for module in (routes_openai, routes_anthropic, routes_ollama, routes_extras, routes_contexts, routes_embed,
                   routes_llamacpp, routes_studio, routes_gateway):
        if module is not routes_studio or registry.settings.routes.ui:  # --no-ui: the Studio's paths are 404s
            app.include_router(module.router)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"error": {"message": json.dumps(exc.errors(), default=str), "type": "invalid_request_error",
                                       "param": None, "code": None}}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, exc: StarletteHTTPException):
        """Unknown paths (404) and methods (405) in the shape of the API the path belongs to."""
        kind = {404: "not_found", 405: "invalid_request"}.get(exc.status_code, "invalid_request")
        message = {404: f"no route {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        response = error_response(proto_for(request.url.path), ProtocolError(exc.status_code, message, kind))
        response.headers.update(exc.headers or {})
        return response

    return app


async def _reap(registry: Registry, contexts: ContextTable):
    while True:
        await asyncio.sleep(REAP_EVERY_S)
        try:
            await expire(contexts, registry)
            await asyncio.to_thread(registry.reap)
        except Exception:  # noqa: BLE001 - the reaper must outlive one bad pass
            logging.getLogger("llamay.server").exception("unloading idle models failed")
