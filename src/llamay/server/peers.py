"""Named contexts behind a gateway: a request for a context this server does not hold (a context route, or
POST /v1/completions with "context": ID) is passed to the peer (`serve --peers`) that holds it, streamed
back as that peer answers. A gateway may then send a context's requests to any worker, whatever its policy.
The holder is found by asking each peer GET /v1/contexts/ID (remembered afterwards); a forwarded request
carries FORWARDED, so a peer answers it itself and never forwards again (no loops)."""
from __future__ import annotations

import json
import logging
import re

import httpx

FORWARDED = "x-llamay-forwarded"
HOP_BY_HOP = {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"}
MAX_HOLDERS = 65536
CONTEXT_PATH = re.compile(r"^/v1/contexts/([^/]+)")  # a context's routes (also `llamay route`'s)
log = logging.getLogger("llamay.server")


class ContextPeers:
    """ASGI middleware: requests for a context held elsewhere go to its holder; everything else passes."""

    def __init__(self, app, peers: tuple[str, ...]):
        self.app, self.peers = app, [p.rstrip("/") for p in peers]
        self.holders: dict[str, str] = {}  # context id -> the peer URL that held it last
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.peers or _header(scope, FORWARDED) is not None:
            return await self.app(scope, receive, send)
        m, body = CONTEXT_PATH.match(scope["path"]), None
        cid = m.group(1) if m else None
        if cid is None and scope["method"] == "POST" and scope["path"] == "/v1/completions":
            body = await _read(receive)
            cid = _body_context(body)
        if cid is None or cid in scope["app"].state.contexts.by_id:
            return await self.app(scope, _replay(body, receive) if body is not None else receive, send)
        if body is None:
            body = await _read(receive)
        holder = await self._holder(cid, scope)
        if holder is None:  # nobody has it: the local route answers its 404
            return await self.app(scope, _replay(body, receive), send)
        await self._forward(holder, cid, scope, body, send)

    async def _holder(self, cid: str, scope) -> str | None:
        if cid in self.holders:
            return self.holders[cid]
        for peer in self.peers:
            try:
                r = await self.client.get(f"{peer}/v1/contexts/{cid}", headers=_auth(scope) + [(FORWARDED, "1")])
            except httpx.HTTPError as e:
                log.warning("peer %s did not answer: %s", peer, e)
                continue
            if r.status_code == 200:
                if len(self.holders) >= MAX_HOLDERS:
                    self.holders.pop(next(iter(self.holders)))
                self.holders[cid] = peer
                return peer
        return None

    async def _forward(self, peer: str, cid: str, scope, body: bytes, send):
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]
                   if k.decode("latin-1").lower() not in HOP_BY_HOP]
        query = scope.get("query_string", b"").decode("latin-1")
        url = peer + scope["path"] + (f"?{query}" if query else "")
        req = self.client.build_request(scope["method"], url, headers=headers + [(FORWARDED, "1")], content=body)
        try:
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as e:
            self.holders.pop(cid, None)
            return await _answer(send, 502, {"error": {"message": f"context '{cid}' is held by {peer}, which did "
                                                                  f"not answer: {e}", "type": "server_error",
                                                       "param": "id", "code": None}})
        try:
            if resp.status_code == 404:
                self.holders.pop(cid, None)  # gone there: ask again next time
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers.multi_items()
                   if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": resp.status_code,
                        "headers": out + [(b"x-llamay-context-holder", peer.encode("latin-1"))]})
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await resp.aclose()


def _header(scope, name: str) -> str | None:
    key = name.encode("latin-1")
    return next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == key), None)


def _auth(scope) -> list[tuple[str, str]]:
    return [(k, v) for k in ("authorization", "x-api-key") if (v := _header(scope, k)) is not None]


def _body_context(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    cid = data.get("context") if isinstance(data, dict) else None
    return cid if isinstance(cid, str) else None


async def _read(receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _replay(body: bytes, receive):
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return again


async def _answer(send, status: int, obj: dict):
    data = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
