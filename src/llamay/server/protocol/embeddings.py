"""Embedding and reranking APIs: request bodies -> EmbedRequest / RerankRequest, vectors -> response bodies.

Wire references: shared/docs/protocols/openai.md §3 (/v1/embeddings), ollama.md §5 (/api/embed and the legacy
/api/embeddings), llama-server.md (rerank). Pure functions over dicts and numpy arrays; errors are
ProtocolError (each route renders them in its API's error shape)."""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import ProtocolError, bad_request
from .llamacpp_params import parse_prompts
from .ollama import parse_keep_alive


@dataclass
class EmbedRequest:
    """inputs: texts, token-id lists or (llama-server's) lists mixing both, in request order. normalize:
    unit-length vectors (the legacy /api/embeddings is raw). dimensions: keep the first N then re-normalise.
    truncate: cut each input to the context (Ollama's default) rather than failing. single: the request
    sent one input, not a list. embd_normalize: llama-server's native routes (raw vectors from the engine,
    then normalised so by native_body; pooling 'none' allowed); None elsewhere."""
    model: str | None
    inputs: list[str | list[int | str]]
    normalize: bool = True
    dimensions: int | None = None
    encoding_format: str = "float"
    truncate: bool = False
    keep_alive: float | None = None
    single: bool = False
    embd_normalize: int | None = None


@dataclass
class RerankRequest:
    model: str | None
    query: str
    documents: list[str]
    top_n: int
    return_documents: bool = False
    tei: bool = False  # the request used `texts` (TEI format): a bare array of {index, score, text?}


# ------------------------------------------------------------------------------------------------ shared


def _model(body: dict) -> str | None:
    """The model named, or None (absent, null or ""): the server's default model."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    return model or None


def _positive_int(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"{key} must be a positive integer, got {value!r}", key)
    return value


def shape_vectors(vectors: list[np.ndarray], req: EmbedRequest, n_embd: int) -> list[np.ndarray]:
    """The engine's vectors as the request wants them: `dimensions` keeps the first N components and
    re-normalises (when the request normalises); N above the model's width is a 400."""
    dims = req.dimensions
    if dims is None:
        return vectors
    if dims > n_embd:
        raise bad_request(f"dimensions {dims} is more than the model's embedding size {n_embd}", "dimensions")
    out = []
    for v in vectors:
        cut = np.asarray(v, dtype=np.float32)[:dims]
        norm = float(np.linalg.norm(cut))
        out.append(cut / norm if req.normalize and norm > 0 else cut)
    return out


def check_finite(vectors: list[np.ndarray]) -> None:
    """Ollama refuses NaN/Inf embeddings (JSON cannot carry them either)."""
    for i, v in enumerate(vectors):
        if not np.all(np.isfinite(v)):
            raise ProtocolError(500, f"embedding {i} contains NaN or Inf values", "internal")

# ------------------------------------------------------------------------------------------------ OpenAI


def _inputs(raw: Any, key: str) -> tuple[list, bool]:
    """OpenAI's string | string[] | int[] | int[][], and llama-server's shapes (llamacpp_params.parse_prompts,
    plus {"content": [text parts]}) -> (inputs, single). An empty string is embedded as llama-server does (a
    model that adds no special tokens refuses it: routes_embed.embed_inputs)."""
    raw = [_parts_text(x, key) for x in raw] if isinstance(raw, list) else _parts_text(raw, key)
    inputs = parse_prompts(raw, key)
    return inputs, not (isinstance(raw, list) and raw and not any(_is_id(x) for x in raw))


def _parts_text(value: Any, key: str) -> Any:
    """llama-server's {"content": [{"type": "text", "text": ...}, ...]} -> the texts joined."""
    if not isinstance(value, dict) or "content" not in value:
        return value
    parts = value["content"]
    if not isinstance(parts, list) or not all(isinstance(p, dict) and p.get("type") == "text"
                                              and isinstance(p.get("text"), str) for p in parts):
        raise bad_request(f"{key}: content must be text parts (this server embeds no images or audio)", key)
    return "".join(p["text"] for p in parts)


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_openai(body: dict) -> EmbedRequest:
    """input: string | string[] | int[] | int[][] or llama-server's shapes (not an empty array);
    encoding_format float | base64; dimensions a positive integer. `user` is ignored."""
    model = _model(body)
    if body.get("input") is None:
        raise bad_request("input is required", "input")
    inputs, single = _inputs(body["input"], "input")
    fmt = body.get("encoding_format")
    if fmt is None:
        fmt = "float"
    if fmt not in ("float", "base64"):
        raise bad_request(f"encoding_format must be 'float' or 'base64', got {fmt!r}", "encoding_format")
    return EmbedRequest(model, inputs, dimensions=_positive_int(body, "dimensions"), encoding_format=fmt,
                        single=single)


def encode_base64(vector: np.ndarray) -> str:
    """OpenAI's base64 embedding: the little-endian float32 bytes, base64-encoded."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def openai_body(req: EmbedRequest, model: str, vectors: list[np.ndarray], prompt_tokens: int) -> dict:
    data = []
    for i, v in enumerate(vectors):
        emb = encode_base64(v) if req.encoding_format == "base64" else np.asarray(v, np.float32).tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {"object": "list", "model": model, "data": data,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}

# ------------------------------------------------------------------------------------------ llama-server


def parse_native(body: Any) -> EmbedRequest:
    """llama-server's /embedding and /embeddings: `input` (or `content`) in its prompt shapes; embd_normalize
    -1 none, 0 max-abs to the int16 range, 1 taxicab, 2 Euclidean (the default), > 2 a p-norm."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    key = "input" if body.get("input") is not None else "content"
    if body.get(key) is None:
        raise bad_request('"input" or "content" must be provided', "input")
    norm = body.get("embd_normalize", 2)
    if isinstance(norm, bool) or not isinstance(norm, int) or norm < -1:
        raise bad_request(f"embd_normalize must be an integer >= -1, got {norm!r}", "embd_normalize")
    inputs, single = _inputs(body[key], key)
    return EmbedRequest(_model(body), inputs, normalize=False, single=single, embd_normalize=norm)


def embd_normalize(v: np.ndarray, mode: int) -> np.ndarray:
    """One pooled vector scaled as llama.cpp's common_embd_normalize (its sums in float64)."""
    v64 = np.asarray(v, np.float64)
    if mode == -1:
        return np.asarray(v, np.float32)
    if mode == 0:
        scale = np.abs(v64).max(initial=0.0) / 32760.0
    elif mode == 2:
        scale = np.sqrt(np.square(v64).sum())
    else:
        scale = np.power(np.power(np.abs(v64), mode).sum(), 1.0 / mode)
    return (v64 / scale).astype(np.float32) if scale > 0 else np.zeros(v64.shape, np.float32)


def native_body(vectors: list[np.ndarray], req: EmbedRequest) -> list[dict]:
    """[{index, embedding: [[...]]}]: one pooled vector per input, or (pooling 'none') one per token, raw."""
    check_finite(vectors)
    rows = [v if v.ndim == 2 else [embd_normalize(v, req.embd_normalize)] for v in vectors]
    return [{"index": i, "embedding": np.asarray(r, np.float32).tolist()} for i, r in enumerate(rows)]

# ------------------------------------------------------------------------------------------------ Ollama


def _ollama_common(body: dict) -> tuple[str, float | None]:
    """The model and keep_alive; Ollama's `options` checked to be an object (none of them changes an embedding)."""
    options = body.get("options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("options must be an object", "options")
    return _model(body), parse_keep_alive(body.get("keep_alive"))


def parse_ollama_embed(body: dict) -> EmbedRequest:
    """/api/embed: input string | string[] (empty: no embeddings); truncate defaults to true (Ollama cuts
    each input at the context length; with false an over-long input is a 400); dimensions as OpenAI."""
    model, keep_alive = _ollama_common(body)
    raw = body.get("input")
    if raw is None or raw == "":
        inputs, single = [], isinstance(raw, str)
    elif isinstance(raw, str):
        inputs, single = [raw], True
    elif isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        inputs, single = list(raw), False
    else:
        raise bad_request("invalid input type", "input")
    truncate = body.get("truncate", True)
    if truncate is None:
        truncate = True
    if not isinstance(truncate, bool):
        raise bad_request("truncate must be a boolean", "truncate")
    return EmbedRequest(model, inputs, dimensions=_positive_int(body, "dimensions"), truncate=truncate,
                        keep_alive=keep_alive, single=single)


def ollama_embed_body(model: str, vectors: list[np.ndarray], prompt_tokens: int, total_ns: int,
                      load_ns: int) -> dict:
    check_finite(vectors)
    return {"model": model, "embeddings": [np.asarray(v, np.float32).tolist() for v in vectors],
            "total_duration": total_ns, "load_duration": load_ns, "prompt_eval_count": prompt_tokens}


def parse_ollama_embeddings(body: dict) -> EmbedRequest:
    """Legacy /api/embeddings: one prompt -> one raw (not normalised) vector; empty prompt: no vector."""
    model, keep_alive = _ollama_common(body)
    prompt = body.get("prompt", "")
    if prompt is None:
        prompt = ""
    if not isinstance(prompt, str):
        raise bad_request("prompt must be a string", "prompt")
    return EmbedRequest(model, [prompt] if prompt else [], normalize=False, keep_alive=keep_alive, single=True)


def ollama_embeddings_body(vectors: list[np.ndarray]) -> dict:
    check_finite(vectors)
    return {"embedding": np.asarray(vectors[0], np.float64).tolist() if vectors else []}

# ------------------------------------------------------------------------------------------------ rerank


def parse_rerank(body: dict) -> RerankRequest:
    """llama-server's rerank: query (string), documents (non-empty string[]; the alias `texts` selects the
    TEI response format), top_n (default: every document), return_documents (TEI: return_text)."""
    model = _model(body)
    query = body.get("query")
    if not isinstance(query, str):
        raise bad_request("query must be a string", "query")
    tei = "texts" in body and "documents" not in body
    key = "texts" if tei else "documents"
    docs = body.get(key)
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise bad_request(f"{key} must be a non-empty array of strings", key)
    top_n = _positive_int(body, "top_n") or len(docs)
    flag = body.get("return_text" if tei else "return_documents", False)
    if not isinstance(flag, bool):
        raise bad_request("return_documents must be a boolean", "return_documents")
    return RerankRequest(model, query, list(docs), min(top_n, len(docs)), flag, tei)


def rerank_body(req: RerankRequest, model: str, scores: list[float], prompt_tokens: int) -> dict | list:
    """Results sorted by score, highest first (ties keep input order), cut to top_n; `index` is the
    document's position in the request. Scores are the model's raw logits."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:req.top_n]
    if req.tei:
        return [{"index": i, "score": float(scores[i]), **({"text": req.documents[i]} if req.return_documents else {})}
                for i in order]
    results = []
    for i in order:
        item = {"index": i, "relevance_score": float(scores[i])}
        if req.return_documents:
            item["document"] = {"text": req.documents[i]}
        results.append(item)
    return {"model": model, "object": "list", "results": results,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
