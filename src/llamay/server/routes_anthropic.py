"""Anthropic routes. Any anthropic-version (and ?beta=true) is accepted; the key in x-api-key or
Authorization: Bearer is checked only under serve --api-key (server/guard.py)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .http import api, off_loop, read_json
from .prepare import with_server_defaults
from .protocol import anthropic as proto
from .render import render
from .responder import RunOptions

router = APIRouter()


@router.post("/v1/messages")
@api(proto)
async def messages(request: Request):
    req = proto.parse_messages(await read_json(request))
    return await request.app.state.responder.run(request, proto, req, proto.MessagesOutput, "msg_",
                                                 "text/event-stream", RunOptions(prompt_usage=True))


@router.post("/v1/messages/count_tokens")
@api(proto)
async def count_tokens(request: Request):
    registry = request.app.state.registry
    req = proto.parse_count_tokens(await read_json(request))
    loaded = await registry.get(req.model, req.keep_alive)
    # the prompt /v1/messages would run: the server's --chat-template and --reasoning too
    ids = await off_loop(request, render, loaded, with_server_defaults(req, registry.settings))
    return JSONResponse(proto.count_tokens_body(len(ids)))
