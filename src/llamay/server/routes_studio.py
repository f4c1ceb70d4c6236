"""The Studio: a web page at /studio (its assets ship in the package, studio/) and the JSON it reads
besides the public APIs: the context tree, the prefix cache's contents, KV pages against the budget,
conversations kept under $LLAMAY_HOME/studio, and the named contexts its conversations run on: at most a
share of --max-contexts, the least recently used freed first (its tokens stay in the prefix cache, so the
page makes it again from the messages cheaply). The page is same-origin, so the guard lets it in; its
Content-Security-Policy allows nothing but this server (no inline script, no other origin)."""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from .. import env
from ..files import write_atomic
from .contexts import free
from .http import api, read_json
from .routes_contexts import chat_context, create_context, fork_context
from .sessions import settle
from .protocol import openai as proto
from .protocol.base import ProtocolError, bad_request

router = APIRouter()
ASSETS = Path(__file__).with_name("studio")
FILES = {p.name: p for p in ASSETS.iterdir() if p.is_file()}  # the only files served: no path from the URL
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".svg": "image/svg+xml"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
           "cache-control": "no-cache"}
CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CONVERSATION = 4 << 20  # bytes of one stored conversation
MAX_CONVERSATIONS = 1000
PREVIEW_TOKENS = 48  # tokens of a cached sequence shown as its text
OWNER = "studio"  # NamedContext.owner of the contexts made through the Studio's routes
CONTEXT_SHARE = 0.25  # of --max-contexts: the most contexts the Studio's conversations hold at once


def wants_page(request: Request) -> bool:
    """A browser navigating (Accept: text/html), not a client expecting Ollama's `GET /` text."""
    return "text/html" in request.headers.get("accept", "")


def redirect_to_studio() -> Response:
    return RedirectResponse("/studio", status_code=302)


@router.get("/studio")
@router.get("/studio/")
async def page():
    return _asset("index.html")


@router.get("/studio/assets/{name}")
async def asset(name: str):
    if name not in FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    return _asset(name)


def _asset(name: str) -> Response:
    path = FILES[name]
    return FileResponse(path, media_type=TYPES.get(path.suffix, "application/octet-stream"), headers=HEADERS)


# -- the state engine's view

@router.get("/studio/api/contexts")
@api(proto)
async def contexts(request: Request):
    """Every named context (a tree by parent) with its tokens, pages, and pages shared with its parent;
    per loaded model, KV pages in use against the budget."""
    table, registry = request.app.state.contexts, request.app.state.registry
    data, kv = [], {}
    for name, loaded in list(registry.loaded.items()):
        mine = [nc for nc in table.values() if nc.model == name]
        rows, kv[name] = await settle(loaded.session.view(lambda view, mine=mine: _context_rows(view, mine)))
        data += rows
    return JSONResponse({"data": data, "kv": kv})


def _context_rows(view, mine) -> tuple[list[dict], dict]:
    """On the scheduler thread, given a read-only StoreView."""
    pages = {nc.id: view.pages(nc.ctx) for nc in mine}
    engine = {nc.id: nc.ctx for nc in mine}
    rows = []
    for nc in mine:
        parent = pages.get(nc.parent, ())
        rows.append({"id": nc.id, "model": nc.model, "parent": nc.parent,
                     "forked_at": view.common_prefix(nc.ctx, engine[nc.parent]) if nc.parent in engine else 0,
                     "created": nc.created, "busy": nc.busy, "owner": nc.owner, "tokens": view.n_tokens(nc.ctx),
                     "pages": len(pages[nc.id]), "shared_with_parent": len(set(pages[nc.id]) & set(parent)),
                     "messages": len(nc.messages) if nc.messages is not None else None,
                     "title": _title(nc.messages)})
    held = {p for ps in pages.values() for p in ps}
    return rows, {"pages_total": view.n_total, "pages_used": view.n_total - view.n_free,
                  "pages_free": view.n_free, "pages_contexts": len(held), "pages_cache": view.n_cached_pages,
                  "page_size": view.page_size, **view.state}


def _title(messages) -> str:
    for m in messages or ():
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"][:80]
    return ""


@router.get("/studio/api/cache")
@api(proto)
async def cache(request: Request):
    """The prefix cache of each loaded model: every cached sequence (most recently used first) with its
    tokens, pages, hits and the start of its text."""
    out = {}
    for name, loaded in list(request.app.state.registry.loaded.items()):
        seqs = await settle(loaded.session.view(lambda view: view.sequences(PREVIEW_TOKENS)))
        out[name] = [{"rank": i, "tokens": n, "pages": pages, "hits": hits, "text": loaded.llm.detokenize(list(first))}
                     for i, (n, first, pages, hits, _) in enumerate(seqs)]
    return JSONResponse({"models": out})


# -- the contexts conversations run on: the page's calls to /v1/contexts, as the Studio's own

def _cap(max_contexts: int) -> int:
    return min(max_contexts, max(2, int(max_contexts * CONTEXT_SHARE)))


async def _with_room(request: Request, n_new: int, keep: tuple[str, ...], make):
    """make() once the Studio holds room for n_new more contexts (its least recently used ones beyond its cap
    freed); on a 429 (--max-contexts, or the contexts' share of KV pages) one more is freed and make retried.
    keep: a context make uses, never freed."""
    table, registry = request.app.state.contexts, request.app.state.registry
    await free(table, registry, table.reclaimable(OWNER, _cap(table.max_contexts), n_new, keep))
    while True:
        try:
            return await make()
        except ProtocolError as e:
            lru = table.reclaimable(OWNER, 0, 0, keep)[:1]
            if e.status != 429 or not lru:
                raise
            await free(table, registry, lru)


@router.post("/studio/api/contexts")
@api(proto)
async def new_context(request: Request):
    """POST /v1/contexts (from messages) for a conversation."""
    return await _with_room(request, 1, (), lambda: create_context(request, OWNER))


@router.post("/studio/api/contexts/{cid}/fork")
@api(proto)
async def fork_conversation(request: Request, cid: str):
    """POST /v1/contexts/{cid}/fork: a branch (an edit or a regenerate) of a conversation."""
    n = request.query_params.get("n", "1")
    n_new = int(n) if n.isdigit() and 1 <= int(n) <= 64 else 0  # another n: fork_context's 400, nothing freed
    return await _with_room(request, n_new, (cid,), lambda: fork_context(request, cid, OWNER))


@router.post("/studio/api/contexts/{cid}/chat")
@api(proto)
async def turn(request: Request, cid: str):
    """POST /v1/contexts/{cid}/chat: a conversation's turn."""
    return await _with_room(request, 0, (cid,), lambda: chat_context(request, cid))


# -- conversations, kept server-side

def _folder() -> Path:
    return env.home() / "studio" / "conversations"


def _path(cid: str) -> Path:
    if not CONVERSATION_ID.match(cid):
        raise bad_request("a conversation id is 1 to 64 letters, digits, - or _", "id")
    return _folder() / f"{cid}.json"


def _index_path() -> Path:
    return _folder().parent / "conversations.json"


def _index() -> dict[str, dict]:
    """id -> {title, model, updated}: what the list shows, kept beside the conversations so listing never
    reads them (each up to MAX_CONVERSATION bytes). A torn or foreign index reads as empty."""
    try:
        index = json.loads(_index_path().read_text("utf-8"))
        return index if isinstance(index, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_index(index: dict[str, dict]):
    data = json.dumps(index, ensure_ascii=False).encode()
    write_atomic(_index_path(), lambda f: f.write(data))


@router.get("/studio/api/conversations")
@api(proto)
async def list_conversations(request: Request):
    rows = [{"id": cid, **row} for cid, row in _index().items() if isinstance(row, dict)]
    rows.sort(key=lambda r: -float(r.get("updated") or 0))
    return JSONResponse({"data": rows})


@router.get("/studio/api/conversations/{cid}")
@api(proto)
async def get_conversation(request: Request, cid: str):
    path = _path(cid)
    try:
        return Response(path.read_bytes(), media_type="application/json")
    except FileNotFoundError:
        raise ProtocolError(404, f"no conversation '{cid}'", "not_found", "id") from None


@router.put("/studio/api/conversations/{cid}")
@api(proto)
async def put_conversation(request: Request, cid: str):
    path = _path(cid)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_CONVERSATION:
        raise ProtocolError(413, f"a conversation is at most {MAX_CONVERSATION >> 20} MiB")
    doc = await read_json(request)
    data = json.dumps(doc, ensure_ascii=False).encode()
    if len(data) > MAX_CONVERSATION:
        raise ProtocolError(413, f"a conversation is at most {MAX_CONVERSATION >> 20} MiB")
    _folder().mkdir(parents=True, exist_ok=True)
    index = _index()
    if cid not in index and len(index) >= MAX_CONVERSATIONS:
        raise ProtocolError(429, f"{MAX_CONVERSATIONS} conversations are kept: delete some first", "rate_limit")
    write_atomic(path, lambda f: f.write(data))
    meta = doc if isinstance(doc, dict) else {}
    index[cid] = {"title": str(meta.get("title", ""))[:200],
                  "model": meta.get("model") if isinstance(meta.get("model"), str) else None, "updated": time.time()}
    _write_index(index)
    return JSONResponse({"id": cid, "saved": True})


@router.patch("/studio/api/conversations/{cid}")
@api(proto)
async def rename_conversation(request: Request, cid: str):
    """{"title": ...}: the conversation's new title."""
    body = await read_json(request)
    title = body.get("title") if isinstance(body, dict) else None
    if not isinstance(title, str) or not title.strip():
        raise bad_request("title must be a non-empty string", "title")
    path, doc = _read(cid)
    doc["title"] = title.strip()[:200]
    data = json.dumps(doc, ensure_ascii=False).encode()
    write_atomic(path, lambda f: f.write(data))
    index = _index()
    index[cid] = {**(index.get(cid) if isinstance(index.get(cid), dict) else {}), "title": doc["title"],
                  "updated": time.time()}
    _write_index(index)
    return JSONResponse({"id": cid, "title": doc["title"]})


@router.get("/studio/api/conversations/{cid}/export")
@api(proto)
async def export_conversation(request: Request, cid: str):
    """The stored conversation (its whole tree of nodes) plus `messages`: the branch shown, as chat messages."""
    _, doc = _read(cid)
    data = json.dumps({**doc, "messages": _branch(doc)}, ensure_ascii=False, indent=1).encode()
    return Response(data, media_type="application/json",
                    headers={"content-disposition": f'attachment; filename="conversation-{cid}.json"'})


def _read(cid: str) -> tuple[Path, dict]:
    path = _path(cid)
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise ProtocolError(404, f"no conversation '{cid}'", "not_found", "id") from None
    except ValueError:
        raise ProtocolError(500, f"conversation '{cid}' is not JSON", "internal", "id") from None
    if not isinstance(doc, dict):
        raise ProtocolError(500, f"conversation '{cid}' is not an object", "internal", "id")
    return path, doc


def _branch(doc: dict) -> list[dict]:
    """The system prompt and the messages from the root to doc's leaf (the page's `path`)."""
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), dict) else {}
    out, seen, nid = [], set(), doc.get("leaf")
    while isinstance(nid, str) and nid in nodes and nid not in seen and isinstance(nodes[nid], dict):
        seen.add(nid)
        n = nodes[nid]
        m = {"role": n.get("role"), "content": n.get("content", "")}
        if n.get("tool_calls"):
            m["tool_calls"] = n["tool_calls"]
        out.append(m)
        nid = n.get("parent")
    system = doc.get("system")
    return ([{"role": "system", "content": system}] if isinstance(system, str) and system else []) + out[::-1]


@router.delete("/studio/api/conversations/{cid}")
@api(proto)
async def delete_conversation(request: Request, cid: str):
    """Deletes the conversation and frees the Studio's contexts it ran on (their tokens stay cached)."""
    try:
        path, doc = _read(cid)
    except ProtocolError as e:
        if e.status == 404:
            raise
        path, doc = _path(cid), {}  # a torn file is deleted all the same
    try:
        os.unlink(path)
    except FileNotFoundError:
        raise ProtocolError(404, f"no conversation '{cid}'", "not_found", "id") from None
    index = _index()
    if index.pop(cid, None) is not None:
        _write_index(index)
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), dict) else {}
    ids = {n.get("ctx") for n in nodes.values() if isinstance(n, dict)}
    table = request.app.state.contexts
    mine = [nc for nc in table.values() if nc.id in ids and nc.owner == OWNER]
    await free(table, request.app.state.registry, mine)
    return JSONResponse({"id": cid, "deleted": True})
