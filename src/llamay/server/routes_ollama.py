"""Ollama routes: NDJSON streams unless "stream": false, durations in nanoseconds, {"error": ...} bodies."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from ..events import Finish, Usage
from . import routes_studio
from .http import api, dumps, read_json
from .protocol import ollama as proto
from .protocol.base import ProtocolError
from .responder import RunOptions, new_meta

router = APIRouter()
NDJSON = "application/x-ndjson"
OLLAMA_VERSION = "0.33.0"  # what Ollama-aware clients gate features on (ollama.md §12)


@router.api_route("/", methods=["GET", "HEAD"])
async def root(request: Request):
    if request.app.state.registry.settings.routes.ui and routes_studio.wants_page(request):  # a browser: the Studio; Ollama's clients still get its text
        return routes_studio.redirect_to_studio()
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version():
    return JSONResponse(proto.version_body(OLLAMA_VERSION))


async def _generate(request: Request, parse, output):
    req = parse(await read_json(request))
    registry = request.app.state.registry
    if registry.upstreams.find(req.model, registry.has) is not None:  # nothing to load here
        if req.ollama.load:
            return _no_generation(req, output, req.ollama.load, req.model)
        return await request.app.state.responder.run(request, proto, req, output, "", NDJSON)
    if req.ollama.load == "unload":
        name = registry.resolve(req.model, exact=True)
        registry.unload(name)
        return _no_generation(req, output, "unload", registry.reply_name(req.model, name))
    loaded = await registry.get(req.model, req.keep_alive)
    if req.ollama.load == "load":
        return _no_generation(req, output, "load", registry.reply_name(req.model, loaded.info.name), loaded.load_ns)
    return await request.app.state.responder.run(request, proto, req, output, "", NDJSON, RunOptions(loaded=loaded))


def _no_generation(req, output, reason: str, model: str, load_ns: int = 0) -> Response:
    """Ollama's load / unload answers: one done line, done_reason "load" or "unload"."""
    out = output(req, new_meta("", model))
    out.feed(Finish(0, reason, Usage(load_ns=load_ns, total_ns=load_ns)))
    return JSONResponse(out.body())


@router.post("/api/generate")
@api(proto)
async def generate(request: Request):
    return await _generate(request, proto.parse_generate, proto.OllamaGenerateOutput)


@router.post("/api/chat")
@api(proto)
async def chat(request: Request):
    return await _generate(request, proto.parse_chat, proto.OllamaChatOutput)


@router.api_route("/api/tags", methods=["GET", "HEAD"])
@api(proto)
async def tags(request: Request):
    registry = request.app.state.registry
    return JSONResponse(proto.tags_body(registry.infos() + await registry.upstreams.infos()))


@router.post("/api/show")
@api(proto)
async def show(request: Request):
    body = await read_json(request)
    name = proto.parse_show(body)
    registry = request.app.state.registry
    return JSONResponse(proto.show_body(registry.info(registry.resolve(name, exact=True)), bool(body.get("verbose"))))


@router.get("/api/ps")
@api(proto)
async def ps(request: Request):
    registry = request.app.state.registry
    return JSONResponse(proto.ps_body([registry.info(name) for name in list(registry.loaded)]))


@router.delete("/api/delete")
@api(proto)
async def delete(request: Request):
    """A stored model is removed from llamay's store (Ollama's store is only read: 400); a file given on
    the command line is only taken off this server, never deleted from disk."""
    registry = request.app.state.registry
    name = registry.resolve(proto.parse_delete(await read_json(request)), exact=True)
    registry.unload(name)
    if name in registry.pinned:
        registry.hidden.add(name)
    else:
        await asyncio.to_thread(_store_call, lambda store: store.remove(name), registry.stored[name])
    registry.refresh()
    return Response(status_code=200)


@router.post("/api/copy")
@api(proto)
async def copy(request: Request):
    registry = request.app.state.registry
    source, destination = proto.parse_copy(await read_json(request))
    name = registry.resolve(source, exact=True)
    if name in registry.pinned:  # a file: a second name for this server's lifetime
        registry.pinned[destination] = registry.pinned[name]
    else:
        await asyncio.to_thread(_store_call, lambda store: store.copy(name, destination), registry.stored[name])
    registry.refresh()
    return Response(status_code=200)


def _store_call(fn, model):
    from ..store import Store, StoreError
    if model.source != "llamay":
        raise ProtocolError(400, f"{model.name} is in Ollama's store, which llamay only reads", param="model")
    try:
        return fn(Store())
    except StoreError as e:
        raise ProtocolError(400, str(e), param="model") from None


@router.post("/api/pull")
@api(proto)
async def pull(request: Request):
    """Ollama's progress objects as NDJSON (status, digest, total, completed), or one object at the end
    with "stream": false. A client that goes away does not stop the download (a later pull resumes)."""
    body = await read_json(request)
    name = body.get("model") or body.get("name")
    if not isinstance(name, str) or not name:
        raise ProtocolError(400, "model is required", param="model")
    stream = body.get("stream", True) is not False
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()

    def progress(status: str, digest: str | None = None, completed: int = 0, total: int = 0):
        update = {"status": status}
        if digest:
            update.update(digest=digest, total=total, completed=completed)
        loop.call_soon_threadsafe(queue.put_nowait, update)

    def run():
        from ..store import Store, StoreError
        from ..store.pull import pull as store_pull
        try:
            store_pull(Store(), name, progress)
        except StoreError as e:
            loop.call_soon_threadsafe(queue.put_nowait, ProtocolError(400, str(e), param="model"))
        except Exception as e:  # noqa: BLE001 - said to the client, not raised into the event loop
            loop.call_soon_threadsafe(queue.put_nowait, ProtocolError(500, f"pull failed: {e}", "internal"))
        loop.call_soon_threadsafe(queue.put_nowait, None)

    worker = asyncio.create_task(asyncio.to_thread(run))
    registry = request.app.state.registry

    async def updates():
        while (item := await queue.get()) is not None:
            yield item
        await worker
        registry.refresh()

    if not stream:
        last = None
        async for item in updates():
            if isinstance(item, ProtocolError):
                raise item
            last = item
        return JSONResponse(last)

    async def lines():
        async for item in updates():
            yield proto.stream_error(item) if isinstance(item, ProtocolError) else dumps(item) + "\n"

    return StreamingResponse(lines(), media_type=NDJSON)
