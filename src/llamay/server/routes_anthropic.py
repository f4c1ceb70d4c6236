"""Anthropic routes. Any key is accepted, in x-api-key or Authorization: Bearer, with any anthropic-version
(and ?beta=true): nothing is checked on a local server."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .generation import render
from .http import api, read_json
from .protocol import anthropic as proto

router = APIRouter()


@router.post("/v1/messages")
@api(proto)
async def messages(request: Request):
    req = proto.parse_messages(await read_json(request))
    return await request.app.state.runner.run(request, proto, req, proto.MessagesOutput, "msg_",
                                              "text/event-stream", prompt_usage=True)


@router.post("/v1/messages/count_tokens")
@api(proto)
async def count_tokens(request: Request):
    req = proto.parse_count_tokens(await read_json(request))
    loaded = await request.app.state.registry.get(req.model, req.keep_alive)
    ids = await asyncio.to_thread(render, loaded, req)
    return JSONResponse(proto.count_tokens_body(len(ids)))
