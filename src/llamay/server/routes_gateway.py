"""What the SGLang Model Gateway (smg) and vllm-router call on a worker beyond the OpenAI routes: SGLang's
registration and control routes (/server_info, /model_info and their get_ forms, /get_load, /flush_cache,
/health_generate, /version), SGLang's native /generate, vLLM's /render routes and its /tokenize and
/detokenize body shapes (routes_extras.py sends those bodies here). Observed against sglang-router 0.3.2 and
vllm-router 0.1.17."""
from __future__ import annotations

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .http import CLIENT_GONE, api, off_loop, read_json
from .prepare import prepare, with_server_defaults
from .protocol import openai
from .protocol import sglang as proto
from .protocol.base import bad_request
from .protocol.timings import BUILD_INFO
from .protocol.vllm_render import generate_request
from .registry import Loaded
from .render import render
from .responder import RunOptions
from .sessions import settle

router = APIRouter()
VERSION = BUILD_INFO.removeprefix("llamay-")
SSE = "text/event-stream"


async def _default(request: Request) -> Loaded:
    return await request.app.state.registry.get(None)


def _model_info(loaded: Loaded) -> dict:
    """SGLang's /model_info: the gateway registers the worker under model_path (the served name here)."""
    name = loaded.info.name
    return {"model_path": name, "tokenizer_path": None, "served_model_name": name, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default", "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": loaded.info.architecture,
            "architectures": [loaded.info.architecture], "context_length": loaded.llm.n_ctx}


for _path in ("/model_info", "/get_model_info"):
    @router.get(_path)
    @api(proto)
    async def model_info(request: Request):
        return JSONResponse(_model_info(await _default(request)))


for _path in ("/server_info", "/get_server_info"):
    @router.get(_path)
    @api(proto)
    async def server_info(request: Request):
        """SGLang's server arguments the gateways read, and its internal_states (one data-parallel rank)."""
        loaded, settings = await _default(request), request.app.state.registry.settings
        load = _load(loaded)
        return JSONResponse({**_model_info(loaded), "tp_size": 1, "dp_size": 1, "pp_size": 1,
                             "max_running_requests": settings.concurrency, "max_queued_requests": settings.max_queue,
                             "context_length": loaded.llm.n_ctx, "page_size": loaded.llm.kv_view().page_size,
                             "skip_tokenizer_init": False, "version": VERSION, "backend": "llamay",
                             "internal_states": [{"load": load["num_reqs"], **load}]})


def _load(loaded: Loaded) -> dict:
    sched, view = loaded.scheduler, loaded.llm.kv_view()
    return {"dp_rank": 0, "num_reqs": sched.n_running + sched.queue_depth, "num_waiting_reqs": sched.queue_depth,
            "num_tokens": (view.n_total - view.n_free) * view.page_size}


@router.get("/get_load")
@api(proto)
async def get_load(request: Request):
    """SGLang's per-rank load: requests running and waiting, and KV tokens in use, summed over loaded models."""
    total = {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}
    for loaded in list(request.app.state.registry.loaded.values()):
        for key, value in _load(loaded).items():
            if key != "dp_rank":
                total[key] += value
    return JSONResponse([total])


@router.api_route("/flush_cache", methods=["GET", "POST"])
@api(proto)
async def flush_cache(request: Request):
    """Drops every prefix-cache page no context holds (memory only: the disk and shared tiers keep theirs)."""
    freed = 0
    for loaded in list(request.app.state.registry.loaded.values()):
        freed += await settle(loaded.session.flush_cache(), loaded.info.name)
    return Response(f"Cache flushed: {freed} pages freed.\n", media_type="text/plain")


@router.get("/health_generate")
@api(proto)
async def health_generate(request: Request):
    """Healthy when the default model generates one token."""
    req = proto.parse_generate({"input_ids": [0], "sampling_params": {"max_new_tokens": 1, "temperature": 0}})[0]
    out = await request.app.state.responder.run(request, proto, req, proto.GenerateOutput, "health-", SSE,
                                                RunOptions(prompt_usage=True))
    return Response(status_code=200) if out.status_code == 200 else out


@router.get("/version")
async def version():
    return JSONResponse({"version": VERSION})


@router.post("/generate")
@api(proto)
async def generate(request: Request):
    """SGLang's native generation: one prompt (streamed or whole) or a batch (a list of results)."""
    reqs = proto.parse_generate(await read_json(request))
    responder, opts = request.app.state.responder, RunOptions(prompt_usage=True)
    if len(reqs) == 1:
        return await responder.run(request, proto, reqs[0], proto.GenerateOutput, "", SSE, opts)
    outs = await responder.run_all(request, reqs, lambda i, r, m, u: proto.GenerateOutput(r, m, u), "", opts)
    if outs is None:
        return Response(status_code=CLIENT_GONE)
    return JSONResponse([out.body() for out in outs])


async def vllm_tokenize(request: Request, body: dict) -> JSONResponse:
    """vLLM's /tokenize: {model, prompt} or {model, messages} -> {count, max_model_len, tokens, token_strs}.
    The messages go through the chat template as /v1/chat/completions renders them."""
    registry = request.app.state.registry
    if body.get("messages") is not None:
        req = openai.parse_chat({k: body[k] for k in ("model", "messages", "tools", "chat_template_kwargs")
                                 if k in body})
    else:
        if not isinstance(body.get("prompt"), str):
            raise bad_request("prompt must be a string", "prompt")
        req = openai.parse_completion({"model": body.get("model"), "prompt": body["prompt"]})
    loaded = await registry.get(req.model)
    req = with_server_defaults(req, registry.settings)
    if body.get("messages") is None:
        add = body.get("add_special_tokens", True)
        ids = loaded.llm.tokenizer.encode(req.prompt, add_special=bool(add), parse_special=True)
    else:
        ids = await off_loop(request, render, loaded, req)
    strs = [loaded.llm.tokenizer.piece(i).decode("utf-8", "replace") for i in ids] \
        if body.get("return_token_strs") else None
    return JSONResponse({"count": len(ids), "max_model_len": loaded.llm.n_ctx, "tokens": ids, "token_strs": strs})


# vLLM's render routes: path -> (the body's parser, its request ids' prefix, answered as a list)
RENDERS = {"/v1/chat/completions/render": (openai.parse_chat, "chatcmpl-", False),
           "/v1/completions/render": (openai.parse_completion, "cmpl-", True),
           "/v1/responses/render": (openai.parse_responses, "resp_", False)}


def _render_route(parse, prefix: str, listed: bool):
    async def render_route(request: Request):
        """The prompt's tokens and sampling as the same body sent to the API would run them, not run."""
        registry = request.app.state.registry
        req = with_server_defaults(parse(await read_json(request)), registry.settings)
        loaded = await registry.get(req.model, req.keep_alive)
        run = await off_loop(request, lambda cancel: prepare(loaded, req, cancel=cancel))
        model = registry.reply_name(req.model, loaded.info.name)
        body = generate_request(run.req, run.ids, run.params, model, loaded.llm.n_ctx, prefix + uuid.uuid4().hex)
        return JSONResponse([body] if listed else body)
    return render_route


for _path, _spec in RENDERS.items():
    router.post(_path)(api(openai)(_render_route(*_spec)))
