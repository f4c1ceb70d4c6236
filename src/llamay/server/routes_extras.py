"""llama-server's extras: /health, /tokenize, /detokenize, /metrics (errors in OpenAI's shape, as it does)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from .http import api, read_json
from .protocol import openai as proto
from .protocol.base import bad_request

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
async def health():
    return JSONResponse({"status": "ok"})


@router.get("/metrics")
async def metrics(request: Request):
    text = request.app.state.responder.metrics.render(request.app.state.registry)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


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
    return JSONResponse({"content": loaded.llm.detokenize(ids)})
