"""Context routes (llamay's own): contexts as named objects that can be created, forked, continued,
downloaded as .llamayctx snapshots and restored. Errors use OpenAI's error shape; generation streams like
OpenAI's completions (the generate form) or chat completions (the chat form).

A context's engine operations are its model's Session verbs (on its scheduler thread); one generation at a
time per context (another is a 409)."""
from __future__ import annotations

import asyncio
import os
import tempfile

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..engine import SnapshotError, snapshots
from ..events import Delta, Finish
from .contexts import ContextTable, NamedContext
from ..toolcall.plan import ToolPlan
from .http import api, off_loop, read_bounded, read_json
from .registry import Loaded
from .prepare import with_server_defaults
from .protocol import openai as proto
from .protocol.base import Output, ProtocolError, bad_request
from .protocol.request import GenRequest
from .protocol.toolcalls import add_call_part
from .render import check_prompt, render, render_plan
from .responder import RunOptions
from .sessions import settle

router = APIRouter()
SNAPSHOT_TYPE = "application/octet-stream"


def _table(request: Request) -> ContextTable:
    return request.app.state.contexts


def _check_idle(nc: NamedContext):
    if nc.busy:
        raise ProtocolError(409, f"context '{nc.id}' is generating", param="id")


def _get(request: Request, cid: str) -> NamedContext:
    return _table(request).get(cid)


async def _describe(nc: NamedContext, loaded: Loaded) -> dict:
    return {"id": nc.id, "object": "context", "model": nc.model, "created": nc.created, "parent": nc.parent,
            **await settle(loaded.session.describe(nc.ctx))}


def _add(request: Request, loaded: Loaded, ctx: int, messages, owner: str | None = None) -> NamedContext:
    return _table(request).add(loaded, ctx, messages, owner=owner)


async def _loaded(request: Request, nc: NamedContext) -> Loaded:
    return await request.app.state.registry.get(nc.model)


@router.post("/v1/contexts")
@api(proto)
async def create(request: Request):
    return await create_context(request)


async def create_context(request: Request, owner: str | None = None):
    """A context from a prompt or messages, or from an uploaded snapshot; owner: see NamedContext."""
    if request.headers.get("content-type", "").startswith(SNAPSHOT_TYPE):
        return await _restore(request)
    body = await read_json(request)
    messages, prompt = body.get("messages"), body.get("prompt")
    if (messages is None) == (prompt is None):
        raise bad_request("give exactly one of prompt or messages", "prompt")
    if prompt is not None and not isinstance(prompt, (str, list)):
        raise bad_request("prompt must be a string or a list of token ids", "prompt")
    tools = {"tools": body["tools"]} if body.get("tools") else {}
    req = proto.parse_chat({"model": body.get("model"), "messages": messages, **tools}) \
        if messages is not None else None
    if req is None:
        req = proto.parse_completion({"model": body.get("model"), "prompt": prompt})
    loaded = await request.app.state.registry.get(req.model)
    ids = await off_loop(request, render, loaded, with_server_defaults(req, request.app.state.registry.settings))
    if not ids:
        raise bad_request("the prompt is empty", "prompt")
    check_prompt(loaded.llm, ids, 0, "prompt")

    _table(request).check_room()
    name = loaded.info.name
    ctx, n_cached, pages = await settle(loaded.session.create(ids, share=_table(request).share(name)), name)
    nc = _add(request, loaded, ctx, req.messages, owner)
    return JSONResponse({"id": nc.id, "object": "context", "model": nc.model, "tokens": len(ids),
                         "pages": pages, "cached_tokens": n_cached}, status_code=201)


async def _restore(request: Request):
    model = request.query_params.get("model")
    loaded = await request.app.state.registry.get(model)
    data = await _read_bounded(request, snapshots.max_bytes(loaded.llm))
    if not data:
        raise bad_request("the snapshot upload is empty")
    _table(request).check_room()
    fd, path = tempfile.mkstemp(suffix=".llamayctx")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            matcher = await asyncio.to_thread(snapshots.read_grammar, loaded.llm, path)
            name = loaded.info.name
            ctx = await settle(loaded.session.restore(path, matcher, _table(request).share(name)), name)
        except SnapshotError as e:
            why = str(e).replace(f"{path}: ", "")  # the server's temp file means nothing to the client
            raise bad_request(f"snapshot refused: {why}", "snapshot") from None
    finally:
        os.unlink(path)
    nc = _add(request, loaded, ctx, None)
    body = await _describe(nc, loaded)
    return JSONResponse({**body, "cached_tokens": body["tokens"]}, status_code=201)  # nothing recomputed


async def _read_bounded(request: Request, limit: int) -> bytes:
    """The body, or a 413 as soon as it passes limit bytes (by Content-Length, or as it arrives)."""
    length = request.headers.get("content-length", "").strip()
    body = None if length.isdigit() and int(length) > limit else await read_bounded(request, limit)
    if body is None:
        raise ProtocolError(413, f"the snapshot is over {limit} bytes, the largest this model's context can "
                                 "hold", param="snapshot")
    return body


@router.get("/v1/contexts")
@api(proto)
async def list_contexts(request: Request):
    registry, data = request.app.state.registry, []
    for nc in list(_table(request).values()):
        loaded = registry.loaded.get(nc.model)
        if loaded is not None:
            data.append(await _describe(nc, loaded))
    return JSONResponse({"object": "list", "data": data})


@router.get("/v1/contexts/{cid}")
@api(proto)
async def show(request: Request, cid: str):
    nc = _get(request, cid)
    loaded = await _loaded(request, nc)
    return JSONResponse(await _describe(nc, loaded))


@router.delete("/v1/contexts/{cid}")
@api(proto)
async def delete(request: Request, cid: str):
    nc = _get(request, cid)
    _check_idle(nc)
    loaded = await _loaded(request, nc)
    _table(request).remove(nc, loaded)
    await settle(loaded.session.free(nc.ctx))
    return JSONResponse({"id": cid, "object": "context.deleted", "deleted": True})


@router.post("/v1/contexts/{cid}/fork")
@api(proto)
async def fork(request: Request, cid: str):
    return await fork_context(request, cid)


async def fork_context(request: Request, cid: str, owner: str | None = None):
    nc = _get(request, cid)
    try:
        n = int(request.query_params.get("n", "1"))
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise bad_request("n must be an integer from 1 to 64", "n")
    keep = _keep_messages(request, nc)
    _check_idle(nc)
    _table(request).check_room(n)
    loaded = await _loaded(request, nc)
    kids = await settle(loaded.session.fork(nc.ctx, n))
    messages = nc.messages[:keep] if nc.messages is not None else None
    made = [_table(request).add(loaded, k, list(messages) if messages is not None else None, nc, owner)
            for k in kids]
    return JSONResponse({"object": "list", "ids": [m.id for m in made]}, status_code=201)


def _keep_messages(request: Request, nc: NamedContext) -> int | None:
    """?messages=k: the forks keep the first k messages of the conversation (an edit or a regenerate of
    message k branches there: their next /chat recomputes only from where the conversation differs)."""
    value = request.query_params.get("messages")
    if value is None:
        return None
    if nc.messages is None:
        raise bad_request(f"context '{nc.id}' was not made from messages", "messages")
    if not value.isdigit() or not 1 <= int(value) <= len(nc.messages):
        raise bad_request(f"messages must be an integer from 1 to {len(nc.messages)}", "messages")
    return int(value)


@router.get("/v1/contexts/{cid}/snapshot")
@api(proto)
async def snapshot(request: Request, cid: str):
    nc = _get(request, cid)
    _check_idle(nc)
    loaded = await _loaded(request, nc)
    fd, path = tempfile.mkstemp(suffix=".llamayctx")
    os.close(fd)
    try:
        await settle(loaded.session.save(nc.ctx, path))
        with open(path, "rb") as f:
            data = f.read()
    finally:
        os.unlink(path)
    return Response(data, media_type=SNAPSHOT_TYPE,
                    headers={"content-disposition": f'attachment; filename="{cid}.llamayctx"'})


@router.post("/v1/contexts/{cid}/generate")
@api(proto)
async def generate(request: Request, cid: str):
    """Continues the context with optional text (appended as is, special tokens parsed, no BOS)."""
    return await generate_on(request, cid, await read_json(request))


async def generate_on(request: Request, cid: str, body: dict):
    """/generate's work for a body already read (also POST /v1/completions with "context": cid)."""
    nc = _get(request, cid)
    req = proto.parse_completion({**body, "model": nc.model, "prompt": body.get("prompt", "")})
    loaded = await _loaded(request, nc)
    text = req.prompt if isinstance(req.prompt, str) else None
    ids = loaded.llm.tokenize(text, add_special=False, parse_special=True) if text is not None else list(req.prompt)
    req.prompt, req.raw, req.n = ids, True, 1
    return await _continue(request, nc, loaded, req, proto.CompletionOutput, "cmpl-", ids)


@router.post("/v1/contexts/{cid}/chat")
@api(proto)
async def chat(request: Request, cid: str):
    return await chat_context(request, cid)


async def chat_context(request: Request, cid: str):
    """Appends messages (none: answers the conversation as it stands) to a context made from messages and
    answers like chat completions. The whole conversation is rendered again; only what differs from the
    context's tokens is computed."""
    nc = _get(request, cid)
    if nc.messages is None:
        raise bad_request(f"context '{cid}' was not made from messages; use /generate", "messages")
    body = await read_json(request)
    appended = body.get("messages") not in (None, [])
    req = proto.parse_chat({**body, "model": nc.model, "messages": body["messages"] if appended else nc.messages})
    loaded = await _loaded(request, nc)
    messages = nc.messages + req.messages if appended else nc.messages
    whole = GenRequest(model=nc.model, messages=messages, tools=req.tools, tool_options=req.tool_options,
                       chat=req.chat)
    full, plan = await off_loop(request, render_plan, loaded,
                                with_server_defaults(whole, request.app.state.registry.settings))
    req.n = 1
    outs: list[_Recording] = []

    def output(r, m) -> _Recording:
        outs.append(_Recording(proto.ChatOutput(r, m)))
        return outs[-1]

    def on_finish(finishes: list[Finish]):
        nc.messages = messages + [outs[0].message()]

    return await _continue(request, nc, loaded, req, output, "chatcmpl-", full, on_finish, rebase=True, tools=plan)


class _Recording:
    """An Output that also keeps the content and tool calls it is fed (to record the assistant's turn)."""

    def __init__(self, out: Output):
        self.out, self.text, self.calls = out, "", []

    def message(self) -> dict:
        msg = {"role": "assistant", "content": self.text}
        if self.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.text}}
                                 for c in self.calls]
        return msg

    def feed(self, ev: Delta | Finish) -> list[str]:
        if isinstance(ev, Delta):
            self.text += ev.content
            for part in ev.tool_calls:
                add_call_part(self.calls, part)
        return self.out.feed(ev)

    def end(self) -> list[str]:
        return self.out.end()

    def body(self) -> dict:
        return self.out.body()

    def fail(self, err: ProtocolError) -> list[str]:
        return self.out.fail(err)


async def _continue(request: Request, nc: NamedContext, loaded: Loaded, req, output, prefix: str,
                    ids: list[int], on_finish=None, rebase: bool = False, tools: ToolPlan | None = None):
    """rebase: ids are the whole context wanted; keep the common prefix with the context, append the rest."""
    _check_idle(nc)
    nc.busy = True

    def idle():
        nc.busy = False

    try:
        share = _table(request).share(nc.model)
        suffix, have = await settle(loaded.session.prepare_append(nc.ctx, ids, rebase, share), nc.model)
    except BaseException:
        idle()
        raise
    req.prompt, req.messages, req.raw = suffix, None, True
    opts = RunOptions(loaded=loaded, ctx=nc.ctx, extra=have, tools=tools, on_finish=on_finish, on_close=idle)
    return await request.app.state.responder.run(request, proto, req, output, prefix, "text/event-stream", opts)
