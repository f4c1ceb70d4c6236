"""Embedding and reranking routes: OpenAI /v1/embeddings, Ollama /api/embed and /api/embeddings,
llama-server's native /embedding and /embeddings, its /v1/rerank (and the unprefixed / `reranking` aliases).

Each request runs whole on one Embedder call (embed_models.run_embedder): encoders in a worker thread under
the model's lock, decoders on their scheduler thread, so generation on other models (or the same one,
between steps) goes on meanwhile."""
from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..events import Usage
from . import requestlog
from .embed_models import run_embedder
from .http import api, read_json
from .protocol import embeddings as conv
from .protocol import llamacpp as llamacpp_proto
from .protocol import ollama as ollama_proto
from .protocol import openai as openai_proto
from .protocol.base import ProtocolError, bad_request
from .protocol.llamacpp_params import mixed_ids
from .render import context_error

router = APIRouter()
log = logging.getLogger("llamay.server")

TOO_LARGE = "input is too large to process"  # how llama-server's message starts; clients match it

def embed_inputs(emb, req: conv.EmbedRequest, pooling: str | None = None) -> tuple[list, int, int, int]:
    """(vectors, prompt tokens, forward passes, ns spent) for req on emb (called on the embedder's thread),
    pooled as `pooling` says (serve --pooling; None: the model's own; 'none', per-token vectors, only on
    llama-server's native routes). An input over the context is cut to it when req.truncate (Ollama's
    default, logged), else a 400 context_length; one of no tokens (an empty text, on a model that adds no
    special tokens) is a 400."""
    t0, passes = time.perf_counter_ns(), emb.n_passes
    pooling = pooling or emb.pooling
    if pooling == "rank" or pooling == "none" and req.embd_normalize is None:
        raise bad_request(f"this model's pooling type is '{pooling}': it does not give one vector per input",
                          "model")
    encode = emb.tokenizer.encode
    inputs = [mixed_ids(x, lambda text, first: encode(text, add_special=first)) if isinstance(x, list) else x
              for x in req.inputs]
    for i, x in enumerate(inputs):
        if isinstance(x, list) and any(t < 0 or t >= emb.tokenizer.n_vocab for t in x):
            raise bad_request(f"input[{i}] has a token id outside the vocabulary (0..{emb.tokenizer.n_vocab - 1})",
                              "input")
    counts = emb.count_tokens(inputs)
    for i, n in enumerate(counts):
        if n == 0:
            raise bad_request(f"input[{i}] has no tokens: it is empty and this model adds no special tokens",
                              "input")
        if n <= emb.n_ctx:
            continue
        if not req.truncate:
            raise context_error(f"{TOO_LARGE}: the input length exceeds the context length: input[{i}] has {n} "
                                f"tokens, the limit is {emb.n_ctx}", n, emb.n_ctx, "input")
        ids = inputs[i] if isinstance(inputs[i], list) else emb.tokenizer.encode(inputs[i])
        inputs[i], counts[i] = ids[:emb.n_ctx], emb.n_ctx
        log.warning("embedding input %d cut from %d to %d tokens (truncate is on)", i, n, emb.n_ctx)
    try:
        vectors = emb.embed(inputs, normalize=req.normalize, pooling=pooling) if inputs else []
    except ValueError as e:
        raise ProtocolError(400, f"{TOO_LARGE}: {e}", "context_length", "input") from None
    return vectors, sum(counts), emb.n_passes - passes, time.perf_counter_ns() - t0


def rank_documents(emb, req: conv.RerankRequest) -> tuple[list[float], int]:
    if emb.pooling != "rank":
        raise bad_request(f"this model does not rerank (its pooling type is '{emb.pooling}', not 'rank')", "model")
    q = emb.count_tokens([req.query])[0]
    total = sum(q + n for n in emb.count_tokens(req.documents))
    try:
        return list(emb.rank(req.query, req.documents)), total
    except ValueError as e:
        raise ProtocolError(400, f"{TOO_LARGE}: {e}", "context_length", "documents") from None


async def _embed(request: Request, req: conv.EmbedRequest):
    pooling = request.app.state.registry.settings.pooling
    used = await run_embedder(request.app.state, req.model, lambda emb: embed_inputs(emb, req, pooling),
                              req.keep_alive)
    _, n_tokens, n_passes, ns = used.result
    request.app.state.responder.metrics.count_embedding(n_tokens, n_passes, ns)
    requestlog.note(request, used.name, Usage(n_tokens))
    return used


@router.post("/v1/embeddings")  # /embeddings is llama-server's native one
@api(openai_proto)
async def openai_embeddings(request: Request):
    req = conv.parse_openai(await read_json(request))
    used = await _embed(request, req)
    vectors, n_tokens, *_ = used.result
    vectors = conv.shape_vectors(vectors, req, used.n_embd)
    model = request.app.state.registry.reply_name(req.model, used.name)
    return JSONResponse(conv.openai_body(req, model, vectors, n_tokens))


for _path in ("/embedding", "/embeddings"):
    @router.post(_path)
    @api(llamacpp_proto)
    async def native_embeddings(request: Request):
        req = conv.parse_native(await read_json(request))
        used = await _embed(request, req)
        return JSONResponse(conv.native_body(used.result[0], req))


@router.post("/api/embed")
@api(ollama_proto)
async def ollama_embed(request: Request):
    t0 = time.perf_counter_ns()
    req = conv.parse_ollama_embed(await read_json(request))
    used = await _embed(request, req)
    vectors, n_tokens, *_ = used.result
    vectors = conv.shape_vectors(vectors, req, used.n_embd)
    total = time.perf_counter_ns() - t0
    model = request.app.state.registry.reply_name(req.model, used.name)
    return JSONResponse(conv.ollama_embed_body(model, vectors, n_tokens, total, used.load_ns))


@router.post("/api/embeddings")
@api(ollama_proto)
async def ollama_embeddings(request: Request):
    req = conv.parse_ollama_embeddings(await read_json(request))
    used = await _embed(request, req)
    return JSONResponse(conv.ollama_embeddings_body(used.result[0]))


for _path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking"):
    @router.post(_path)
    @api(openai_proto)
    async def rerank(request: Request):
        req = conv.parse_rerank(await read_json(request))
        used = await run_embedder(request.app.state, req.model, lambda emb: rank_documents(emb, req))
        scores, n_tokens = used.result
        return JSONResponse(conv.rerank_body(req, request.app.state.registry.reply_name(req.model, used.name),
                                             scores, n_tokens))
