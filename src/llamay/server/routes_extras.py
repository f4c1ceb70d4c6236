"""llama-server's extras: /health, /tokenize, /detokenize, /metrics, /lora-adapters (errors in OpenAI's shape,
as it does)."""
from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from . import routes_gateway
from .http import api, read_json
from .protocol import llamacpp, openai as proto
from .routes_gate import require
from .protocol.base import bad_request

router = APIRouter()
START_TIME = time.time()  # llama-server's Process-Start-Time-Unix header on /metrics


@router.get("/health")
@router.get("/v1/health")
async def health():
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
@api(llamacpp)
async def metrics(request: Request):
    require(request.app.state.registry.settings.routes, "metrics")
    text = request.app.state.responder.metrics.render(request.app.state.registry)
    response = PlainTextResponse(text, media_type="text/plain; version=0.0.4")
    # spelled as llama-server sends it (clients that read headers into a plain dict look it up so)
    response.raw_headers.append((b"Process-Start-Time-Unix", str(int(START_TIME)).encode()))
    return response


def _model(body: dict) -> str | None:
    """The optional model name (absent: the default model)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    return model


@router.post("/tokenize")
@api(proto)
async def tokenize(request: Request):
    body = await read_json(request)
    content = body.get("content")
    if content is None and isinstance(body, dict) and ("prompt" in body or "messages" in body):
        return await routes_gateway.vllm_tokenize(request, body)  # vLLM's body (vllm-router sends it)
    if not isinstance(content, str):
        raise bad_request("content must be a string", "content")
    loaded = await request.app.state.registry.get(_model(body))
    tok = loaded.llm.tokenizer
    ids = tok.encode(content, add_special=bool(body.get("add_special", False)),
                     parse_special=bool(body.get("parse_special", True)))
    if not body.get("with_pieces"):
        return JSONResponse({"tokens": ids})
    pieces = []
    for i in ids:
        raw = tok.piece(i)
        try:
            pieces.append({"id": i, "piece": raw.decode("utf-8")})
        except UnicodeDecodeError:
            pieces.append({"id": i, "piece": list(raw)})
    return JSONResponse({"tokens": pieces})


@router.post("/detokenize")
@api(proto)
async def detokenize(request: Request):
    body = await read_json(request)
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise bad_request("tokens must be a list of integers", "tokens")
    loaded = await request.app.state.registry.get(_model(body))
    try:
        loaded.llm.check_vocab(ids)
    except ValueError as e:
        raise bad_request(str(e), "tokens") from None
    text = loaded.llm.detokenize(ids)
    return JSONResponse({"content": text, "prompt": text} if "model" in body else {"content": text})  # vLLM's: prompt


@router.get("/lora-adapters")
@api(proto)
async def lora_adapters(request: Request):
    """llama-server's list of the default model's adapters: [{id, path, scale}], scale the default one
    (what a request that does not choose gets)."""
    loaded = await request.app.state.registry.get(request.query_params.get("model"))
    return JSONResponse(_adapter_list(loaded.llm))


@router.post("/lora-adapters")
@api(proto)
async def set_lora_adapters(request: Request):
    """[{id, scale}]: new default scales; adapters left out get 0, as llama-server does. Contexts computed
    under the old scales keep them (the prefix cache keys K/V by adapters and scales)."""
    body = await read_json(request, array=True)
    loaded = await request.app.state.registry.get(request.query_params.get("model"))
    llm = loaded.llm
    if not all(isinstance(e, dict) for e in body):
        raise bad_request("the body must be a list of {\"id\": N, \"scale\": S}")
    names = sorted(a.name for a in llm.loras)
    scales = {}
    for e in body:
        i, scale = e.get("id"), e.get("scale")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(names):
            raise bad_request(f"id {i!r} names no adapter (ids 0..{len(names) - 1})", "id")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise bad_request(f"scale of adapter {i} must be a number", "scale")
        scales[names[i]] = float(scale)
    try:
        llm.set_default_lora(scales)
    except ValueError as e:
        raise bad_request(str(e), "scale") from None
    return JSONResponse(_adapter_list(llm))


def _adapter_list(llm) -> list[dict]:
    default = dict(llm.default_lora)
    return [{"id": i, "path": a.path, "scale": default.get(a.name, 0.0)}
            for i, a in enumerate(sorted(llm.loras, key=lambda a: a.name))]
