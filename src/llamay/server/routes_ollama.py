"""Ollama routes: NDJSON streams unless "stream": false, durations in nanoseconds, {"error": ...} bodies."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from .http import api, new_meta, read_json
from .protocol import ollama as proto
from .protocol.base import Finish, ProtocolError, Usage

router = APIRouter()
NDJSON = "application/x-ndjson"
OLLAMA_VERSION = "0.33.0"  # what Ollama-aware clients gate features on (ollama.md §12)


@router.api_route("/", methods=["GET", "HEAD"])
async def root():
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version():
    return JSONResponse(proto.version_body(OLLAMA_VERSION))


async def _generate(request: Request, parse, output):
    req = parse(await read_json(request))
    registry = request.app.state.registry
    if req.options.get("unload"):
        registry.unload(registry.resolve(req.model))
        return _no_generation(req, output, "unload")
    loaded = await registry.get(req.model, req.keep_alive)
    if req.options.get("load_only"):
        return _no_generation(req, output, "load", loaded.load_ns)
    return await request.app.state.runner.run(request, proto, req, output, "", NDJSON, loaded=loaded)


def _no_generation(req, output, reason: str, load_ns: int = 0) -> Response:
    """Ollama's load / unload answers: one done line, done_reason "load" or "unload"."""
    out = output(req, new_meta("", req.model))
    out.feed(Finish(0, reason, Usage(load_ns=load_ns, total_ns=load_ns)))
    return JSONResponse(out.body())


@router.post("/api/generate")
@api(proto)
async def generate(request: Request):
    return await _generate(request, proto.parse_generate, proto.GenerateOutput)


@router.post("/api/chat")
@api(proto)
async def chat(request: Request):
    return await _generate(request, proto.parse_chat, proto.ChatOutput)


@router.api_route("/api/tags", methods=["GET", "HEAD"])
@api(proto)
async def tags(request: Request):
    return JSONResponse(proto.tags_body(request.app.state.registry.infos()))


@router.post("/api/show")
@api(proto)
async def show(request: Request):
    body = await read_json(request)
    name = proto.parse_show(body)
    registry = request.app.state.registry
    return JSONResponse(proto.show_body(registry.info(registry.resolve(name)), bool(body.get("verbose"))))


@router.get("/api/ps")
@api(proto)
async def ps(request: Request):
    registry = request.app.state.registry
    return JSONResponse(proto.ps_body([registry.info(name) for name in list(registry.loaded)]))


@router.delete("/api/delete")
@api(proto)
async def delete(request: Request):
    """Takes the name off this server (unloading it); model files given on the command line are never
    deleted from disk."""
    registry = request.app.state.registry
    name = registry.resolve(proto.parse_delete(await read_json(request)))
    registry.unload(name)
    del registry.paths[name]
    return Response(status_code=200)


@router.post("/api/copy")
@api(proto)
async def copy(request: Request):
    """A second name for a model (for this server's lifetime)."""
    registry = request.app.state.registry
    source, destination = proto.parse_copy(await read_json(request))
    path = registry.paths[registry.resolve(source)]
    if not destination:
        raise ProtocolError(400, "destination is required", param="destination")
    registry.paths[destination] = path
    return Response(status_code=200)
