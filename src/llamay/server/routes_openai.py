"""OpenAI routes (served with and without the /v1 prefix, as llama-server does, but for completions:
its /completions is its native API)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from . import routes_contexts, upstream
from .http import api, off_loop, read_json
from .prepare import with_server_defaults
from .protocol import llamacpp as llamacpp_proto
from .protocol import openai as proto
from .protocol.base import ProtocolError, bad_request
from .render import model_view, render
from .responder import RunOptions

router = APIRouter()
SSE = "text/event-stream"


def _both(path: str):
    return [path, path.removeprefix("/v1")]


async def _generate(request: Request, parse, output, prefix: str):
    req = parse(await read_json(request))
    return await request.app.state.responder.run(request, proto, req, output, prefix, SSE)


for _path in _both("/v1/chat/completions"):
    @router.post(_path)
    @api(proto)
    async def chat_completions(request: Request):
        """With verbose (the request's, else serve -v's) the result carries llama-server's __verbose."""
        req, registry = proto.parse_chat(await read_json(request)), request.app.state.registry
        verbose = registry.settings.verbose if req.llama.verbose is None else req.llama.verbose
        if not verbose or registry.upstreams.find(req.model, registry.has) is not None:
            return await request.app.state.responder.run(request, proto, req, proto.ChatOutput, "chatcmpl-", SSE)
        loaded = await registry.get(req.model, req.keep_alive)
        view = model_view(loaded, registry.settings)
        return await request.app.state.responder.run(
            request, proto, req, lambda r, m, u: proto.ChatOutput(r, m, llamacpp_proto.CompletionOutput(r, m, u, view)),
            "chatcmpl-", SSE, RunOptions(loaded=loaded, prompt_usage=True))


for _path in _both("/v1/chat/completions/input_tokens"):
    @router.post(_path)
    @api(proto)
    async def chat_input_tokens(request: Request):
        """llama-server's: the chat body's prompt tokens, as the server's template renders them, not run."""
        registry = request.app.state.registry
        req = with_server_defaults(proto.parse_chat(await read_json(request)), registry.settings)
        loaded = await registry.get(req.model, req.keep_alive)
        return JSONResponse({"input_tokens": len(await off_loop(request, render, loaded, req))})


@router.post("/v1/completions")  # /completions is llama-server's native one (routes_llamacpp.py)
@api(proto)
async def completions(request: Request):
    """With "context": ID (llamay's field) it continues that named context as /v1/contexts/ID/generate does:
    the way to reach a context through a gateway that carries only the OpenAI routes (SGLang's)."""
    body = await read_json(request)
    if isinstance(body, dict) and body.get("context") is not None:
        if not isinstance(body["context"], str):
            raise bad_request("'context' must be a context id", "context")
        return await routes_contexts.generate_on(request, body["context"], body)
    return await _generate(request, proto.parse_completion, proto.CompletionOutput, "cmpl-")


for _path in _both("/v1/responses"):
    @router.post(_path)
    @api(proto)
    async def responses(request: Request):
        return await _generate(request, proto.parse_responses, proto.ResponsesOutput, "resp_")

for _path in _both("/v1/models"):
    @router.get(_path)
    @api(proto)
    async def models(request: Request):
        registry = request.app.state.registry
        body = proto.models_body(registry.infos() + await registry.upstreams.infos())
        for entry in body["data"]:
            entry.update(registry.listing(entry["id"]))
        return JSONResponse(body)

for _path in _both("/v1/models/{model:path}"):
    @router.get(_path)
    @api(proto)
    async def model(request: Request, model: str):
        registry = request.app.state.registry
        found = registry.upstreams.find(model, registry.has)
        if found is not None:
            await registry.upstreams.infos()  # the lists read once
            if found[1] not in found[0].models:
                raise ProtocolError(404, f"model '{model}' is not in its upstream's model list", "not_found", "model")
            return JSONResponse(proto.model_body(upstream.info(*found)))
        return JSONResponse(proto.model_body(registry.info(registry.resolve(model, exact=True))))
