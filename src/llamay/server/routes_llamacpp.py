"""llama-server's native routes: /completion (and /completions), /infill, /apply-template, /props, /slots
and /slots/{id}?action=save|restore|erase. Errors in llama-server's shape ({"error": {code, message, type}})."""
from __future__ import annotations

import asyncio
import os
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..engine import SnapshotError, snapshots
from . import slots as slot_ops
from .http import CLIENT_GONE, api, off_loop, read_json
from .registry import Loaded
from .prepare import with_server_defaults
from .protocol import llamacpp as proto
from .protocol.base import ProtocolError
from .protocol.llamacpp_infill import FimVocab, infill_ids, missing
from .protocol.request import GenRequest
from .render import chat_plan, model_view, render_text
from .responder import RunOptions
from .routes_gate import require

router = APIRouter()
SSE = "text/event-stream"


async def _complete(request: Request, reqs: list[GenRequest], loaded: Loaded):
    """One result (streamed or whole), or a batch's results in one array."""
    responder, view = request.app.state.responder, model_view(loaded, request.app.state.registry.settings)
    opts = RunOptions(loaded=loaded, prompt_usage=True)
    if len(reqs) == 1:
        return await responder.run(request, proto, reqs[0], lambda r, m, u: proto.CompletionOutput(r, m, u, view),
                                   "cmpl-", SSE, opts)
    outs = await responder.run_all(request, reqs, lambda i, r, m, u: proto.CompletionOutput(r, m, u, view, i * r.n),
                                   "cmpl-", opts)
    if outs is None:
        return Response(status_code=CLIENT_GONE)
    return JSONResponse([result for out in outs for result in out.results()])


for _path in ("/completion", "/completions"):
    @router.post(_path)
    @api(proto)
    async def completion(request: Request):
        reqs = proto.parse_completion(await read_json(request))
        loaded = await request.app.state.registry.get(reqs[0].model)
        return await _complete(request, reqs, loaded)


@router.post("/infill")
@api(proto)
async def infill(request: Request):
    """The prompt is cut as llama-server cuts it: to a batch and the context (with the server's -n)."""
    req, fill = proto.parse_infill(await read_json(request))
    loaded = await request.app.state.registry.get(req.model)
    vocab, settings = _fim_vocab(loaded.llm.tokenizer), request.app.state.registry.settings
    n_predict = -1 if settings.n_predict is None else settings.n_predict
    req.prompt = await off_loop(request, lambda cancel: infill_ids(fill, vocab, settings.batch, n_predict,
                                                                   loaded.llm.n_ctx))
    return await _complete(request, [req], loaded)


def _fim_vocab(tok) -> FimVocab:
    why = missing(tok.fim_ids)
    if why:
        raise ProtocolError(501, f"Infill is not supported by this model: {why}", "not_supported")
    return FimVocab(tok.fim_ids, lambda text, special: tok.encode(text, add_special=False, parse_special=special),
                    tok.bos_id if tok.add_bos_token else None)


@router.post("/apply-template")
@api(proto)
async def apply_template(request: Request):
    """{"prompt": the chat template's text}: what /v1/chat/completions would generate from."""
    req, add_generation_prompt = proto.parse_apply_template(await read_json(request))
    registry = request.app.state.registry
    loaded = await registry.get(req.model)
    req = with_server_defaults(req, registry.settings)

    def render(cancel):
        template, plan = chat_plan(loaded, req, req.messages)
        return render_text(template, plan, req, add_generation_prompt, cancel)
    return JSONResponse({"prompt": await off_loop(request, render)})


@router.get("/props")
@api(proto)
async def props(request: Request):
    registry = request.app.state.registry
    loaded = await registry.get(request.query_params.get("model"))
    settings = registry.settings
    defaults = with_server_defaults(GenRequest(model=None), settings)
    body = proto.props_body(model_view(loaded, settings), defaults, settings.concurrency)
    body.update(endpoint_slots=settings.routes.slots, endpoint_metrics=settings.routes.metrics)
    return JSONResponse(body)


@router.post("/props")
@api(proto)
async def set_props(request: Request):
    raise ProtocolError(501, "This server does not support changing global properties", "not_supported")


@router.get("/slots")
@api(proto)
async def list_slots(request: Request):
    require(request.app.state.registry.settings.routes, "slots")
    loaded = await request.app.state.registry.get(request.query_params.get("model"))
    table = request.app.state.responder.slots.slots(loaded.info.name)
    if request.query_params.get("fail_on_no_slot") and all(s.busy for s in table):
        raise ProtocolError(503, "no slot available", "overloaded")
    return JSONResponse([proto.slot_body(s, loaded.llm.n_ctx, loaded.info.name) for s in table])


@router.post("/slots/{id_slot}")
@api(proto)
async def slot_action(request: Request, id_slot: str):
    registry = request.app.state.registry
    save_dir = registry.settings.slot_save_path
    if save_dir is None:
        raise ProtocolError(501, "This server does not support slots action. Start it with `--slot-save-path`",
                            "not_supported")
    n, action = proto.parse_slot_action(id_slot, request.query_params.get("action"))
    loaded = await registry.get(request.query_params.get("model"))
    slot = request.app.state.responder.slots.get(loaded.info.name, n)
    if action == "erase":
        return JSONResponse({"id_slot": n, "n_erased": slot_ops.erase(slot)})
    filename = proto.parse_filename(await read_json(request))
    path = os.path.join(save_dir, filename)
    t0 = time.perf_counter()
    if action == "save":
        n_saved, n_written = await _save(loaded, slot, path)
        return JSONResponse({"id_slot": n, "filename": filename, "n_saved": n_saved, "n_written": n_written,
                             "timings": {"save_ms": (time.perf_counter() - t0) * 1e3}})
    n_restored = await _restore(loaded, slot, path, filename)
    return JSONResponse({"id_slot": n, "filename": filename, "n_restored": n_restored,
                         "n_read": os.path.getsize(path), "timings": {"restore_ms": (time.perf_counter() - t0) * 1e3}})


async def _save(loaded: Loaded, slot, path: str) -> tuple[int, int]:
    try:
        return await slot_ops.save(loaded.session, slot, path)
    except OSError as e:
        raise ProtocolError(500, f"Unable to save slot: {e.strerror}", "internal") from None


async def _restore(loaded: Loaded, slot, path: str, filename: str) -> int:
    try:
        matcher = await asyncio.to_thread(snapshots.read_grammar, loaded.llm, path)
        return await slot_ops.restore(loaded.session, slot, path, matcher)
    except (SnapshotError, OSError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ProtocolError(400, f"Unable to restore slot: {why.replace(path, filename)}") from None
