"""The FastAPI app: every API's routes on one address over one model registry."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from . import routes_anthropic, routes_contexts, routes_embed, routes_extras, routes_ollama, routes_openai
from .http import Runner
from .metrics import Metrics
from .models import Registry

REAP_EVERY_S = 5.0


def create_app(registry: Registry) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        reaper = asyncio.create_task(_reap(registry))
        try:
            yield
        finally:
            reaper.cancel()
            await asyncio.to_thread(registry.close)

    app = FastAPI(title="llamay", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.registry = registry
    app.state.runner = Runner(registry, Metrics())
    app.state.contexts = {}
    for module in (routes_openai, routes_anthropic, routes_ollama, routes_extras, routes_contexts, routes_embed):
        app.include_router(module.router)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"error": {"message": json.dumps(exc.errors(), default=str), "type": "invalid_request_error",
                                       "param": None, "code": None}}, status_code=400)

    return app


async def _reap(registry: Registry):
    while True:
        await asyncio.sleep(REAP_EVERY_S)
        try:
            await asyncio.to_thread(registry.reap)
        except Exception:  # noqa: BLE001 - the reaper must outlive one bad pass
            logging.getLogger("llamay.server").exception("unloading idle models failed")
