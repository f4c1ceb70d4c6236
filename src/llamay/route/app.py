"""The front's ASGI app: every path of every API is passed through to a backend, byte for byte and
streamed; the backend is chosen by the request's prompt prefix (keys.py) on the ring (ring.py). A backend
that cannot be reached, or answers 503 while another is up, is failed over to the next (the body is held
until a backend takes it); health checks take a backend out and bring it back. Named contexts live on one
backend: their routes go to the one holding them. The front's own paths: /health, /metrics,
/route/backends."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..server.guard import Guard, GuardSettings, proto_for
from ..server.http import read_bounded
from ..server.protocol.base import ProtocolError
from ..settings import ROUTE, RouteSettings
from .keys import context_id, route_key
from .ring import Ring

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length"})
# not passed on: the front's guard already judged the page, and its CORS headers are the front's own
DROP_REQUEST = HOP_BY_HOP | {"origin"}
DROP_RESPONSE = HOP_BY_HOP - {"content-length"} | {"access-control-allow-origin", "access-control-expose-headers",
                                                   "vary"}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
BACKEND_HEADER = "x-llamay-backend"  # on every passed-through response: which server answered
MAX_HOLDERS = 65536  # named context ids remembered (each server holds at most --max-contexts)


@dataclass
class Backend:
    url: str
    up: bool = True  # until a check or a request says otherwise
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    last_error: str = ""
    checked: float = 0.0  # when the last health check ended (time.time())

    def down(self, why: str):
        self.up, self.last_error = False, why
        self.failures += 1


class Router:
    def __init__(self, urls: list[str], settings: RouteSettings = ROUTE):
        urls = [u.rstrip("/") for u in urls]
        self.settings, self.ring = settings, Ring(urls, settings.vnodes)
        self.backends = {u: Backend(u) for u in urls}
        self.holders: dict[str, str] = {}  # named context id -> the backend holding it
        self.failovers = 0
        self.client: httpx.AsyncClient | None = None

    # -- lifecycle

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        timeout = httpx.Timeout(None, connect=self.settings.connect_timeout)
        async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None,
                                     max_keepalive_connections=64)) as self.client:
            await self.check_all()
            task = asyncio.create_task(self._health_loop())
            try:
                yield
            finally:
                task.cancel()

    async def _health_loop(self):
        while True:
            await asyncio.sleep(self.settings.health_interval)
            await self.check_all()

    async def check_all(self):
        await asyncio.gather(*(self._check(b) for b in self.backends.values()))

    async def _check(self, b: Backend):
        try:
            r = await self.client.get(b.url + "/health", timeout=self.settings.health_timeout)
            ok, why = r.status_code == 200, f"/health answered {r.status_code}"
        except httpx.HTTPError as e:
            ok, why = False, _why(e)
        b.checked = time.time()
        if ok:
            b.up = True
        elif b.up:
            b.down(why)

    # -- routing

    def order(self, key: bytes) -> list[Backend]:
        names = self.ring.choose(key, lambda n: self.backends[n].up, lambda n: self.backends[n].in_flight,
                                 self.settings.load_factor)
        return [self.backends[n] for n in names]

    async def handle(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        body = await read_bounded(request, self.settings.max_body)  # the guard bounds JSON; this, uploads
        if body is None:
            return _error(path, 413, f"the request body is over {self.settings.max_body >> 20} MiB (the front holds "
                                     "it until a server takes it)")
        cid = context_id(path)
        if cid is not None:
            order = await self._holder_order(cid, request)
        elif path == "/v1/contexts" and method == "GET":
            return await self._list_contexts(request)
        else:
            order = self.order(route_key(body, self.settings.prefix_chars) if method != "GET" else b"")
        tried = []
        for i, b in enumerate(order):
            last = i == len(order) - 1 or not any(o.up for o in order[i + 1:])
            try:
                resp = await self._send(b, request, body)
            except httpx.TransportError as e:
                b.down(_why(e))
                tried.append(f"{b.url}: {_why(e)}")
                self.failovers += 1
                continue
            if resp.status_code == 503 and not last:  # busy or loading: the next one may take it
                await resp.aclose()
                tried.append(f"{b.url}: busy (503)")
                self.failovers += 1
                continue
            return await self._answer(b, resp, path, method, cid)
        return _error(path, 502, "no backend could take the request: " + "; ".join(tried))

    async def _send(self, b: Backend, request: Request, body: bytes) -> httpx.Response:
        headers = [(k, v) for k, v in request.headers.items() if k not in DROP_REQUEST]
        client = request.client.host if request.client else ""
        headers.append(("x-forwarded-for", client))
        url = b.url + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        req = self.client.build_request(request.method, url, headers=headers, content=body)
        b.in_flight += 1
        try:
            resp = await self.client.send(req, stream=True)
        except BaseException:
            b.in_flight -= 1
            raise
        b.requests += 1
        return resp

    async def _answer(self, b: Backend, resp: httpx.Response, path: str, method: str, cid: str | None) -> Response:
        headers = {k: v for k, v in resp.headers.items() if k not in DROP_RESPONSE}
        headers[BACKEND_HEADER] = b.url
        learns = method == "POST" and (path == "/v1/contexts" or (cid is not None and path.endswith("/fork")))
        if not (learns or (cid is not None and method == "DELETE")):
            return Passthrough(resp, headers, lambda: _done(b))
        try:  # small JSON answers whose ids the front must learn (or forget)
            data = await resp.aread()
        finally:
            await resp.aclose()
            _done(b)
        if resp.is_success and learns:
            for new in _ids(data):
                self._hold(new, b.url)
        elif resp.is_success:
            self.holders.pop(cid, None)
        return Response(data, status_code=resp.status_code, headers=headers)

    def _hold(self, cid: str, url: str):
        """Remember cid's server; the oldest entries go past MAX_HOLDERS (a context the servers expired by
        their --context-ttl is never deleted through the front: a forgotten id is asked for again)."""
        self.holders.pop(cid, None)
        self.holders[cid] = url
        while len(self.holders) > MAX_HOLDERS:
            del self.holders[next(iter(self.holders))]

    async def _holder_order(self, cid: str, request: Request) -> list[Backend]:
        """The backend holding context cid (asked of each up backend when the front has not seen it made,
        e.g. after the front restarted), else every backend (their 404 answers)."""
        url = self.holders.get(cid)
        if url is None:
            for b in [b for b in self.backends.values() if b.up]:
                with contextlib.suppress(httpx.HTTPError):
                    if (await self.client.get(f"{b.url}/v1/contexts/{cid}", headers=_auth(request))).status_code == 200:
                        url = b.url
                        self._hold(cid, url)
                        break
        return [self.backends[url]] if url else list(self.backends.values())[:1]

    async def _list_contexts(self, request: Request) -> Response:
        """GET /v1/contexts: every up backend's list, joined."""
        data = []
        for b in [b for b in self.backends.values() if b.up]:
            try:
                r = await self.client.get(b.url + "/v1/contexts", headers=_auth(request))
            except httpx.HTTPError as e:
                b.down(_why(e))
                continue
            if r.status_code != 200:
                return Response(r.content, status_code=r.status_code, media_type="application/json")
            for item in r.json().get("data", []):
                self._hold(item.get("id"), b.url)
                data.append(item)
        return JSONResponse({"object": "list", "data": data})

    # -- the front's own routes

    async def health(self, request: Request) -> Response:
        n = sum(b.up for b in self.backends.values())
        return JSONResponse({"status": "ok" if n else "no backend is up", "backends_up": n},
                            status_code=200 if n else 503)

    async def status(self, request: Request) -> Response:
        return JSONResponse({"backends": [vars(b) for b in self.backends.values()], "failovers": self.failovers,
                             "contexts": len(self.holders)})

    async def metrics(self, request: Request) -> Response:
        lines = ["# HELP llamay_route_backend_up 1 while the backend passes its health checks",
                 "# TYPE llamay_route_backend_up gauge"]
        lines += [f'llamay_route_backend_up{{backend="{b.url}"}} {int(b.up)}' for b in self.backends.values()]
        for name, kind, what in (("requests_total", "counter", "requests passed to the backend"),
                                 ("failures_total", "counter", "times the backend was found down"),
                                 ("in_flight", "gauge", "requests the backend is answering now")):
            lines += [f"# HELP llamay_route_{name} {what}", f"# TYPE llamay_route_{name} {kind}"]
            attr = name.removesuffix("_total")
            lines += [f'llamay_route_{name}{{backend="{b.url}"}} {getattr(b, attr)}' for b in self.backends.values()]
        lines += ["# HELP llamay_route_failovers_total requests sent on to another backend",
                  "# TYPE llamay_route_failovers_total counter", f"llamay_route_failovers_total {self.failovers}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


class Passthrough(Response):
    """A backend's response streamed to the client as it arrives. A client that goes away closes the
    backend's response (so the backend cancels the generation); a backend that dies mid-answer aborts
    the client's connection (a truncated answer must not look whole)."""

    def __init__(self, resp: httpx.Response, headers: dict[str, str], done):
        self.resp, self.status_code, self.done = resp, resp.status_code, done
        self.raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.background = None

    async def __call__(self, scope, receive, send):
        try:
            async with anyio.create_task_group() as tg:
                async def watch():
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()
                tg.start_soon(watch)
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw})
                async for chunk in self.resp.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.resp.aclose()
            self.done()


def _auth(request: Request) -> dict[str, str]:
    """The client's key headers, for the front's own calls to the servers on its behalf."""
    return {k: v for k, v in request.headers.items() if k in ("authorization", "x-api-key")}


def _done(b: Backend):
    b.in_flight -= 1


def _ids(data: bytes) -> list[str]:
    try:
        body = json.loads(data)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    ids = body.get("ids") or [body.get("id")]
    return [i for i in ids if isinstance(i, str)]


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _error(path: str, status: int, message: str) -> Response:
    body = proto_for(path).error_body(ProtocolError(status, message, "overloaded"))
    return JSONResponse(body, status_code=status)


def create_app(urls: list[str], settings: RouteSettings = ROUTE, guard: GuardSettings = GuardSettings()) -> Starlette:
    router = Router(urls, settings)
    app = Starlette(routes=[Route("/health", router.health), Route("/metrics", router.metrics),
                            Route("/route/backends", router.status),
                            Route("/{path:path}", router.handle, methods=METHODS)],
                    lifespan=router.lifespan)
    app.state.router = router
    app.add_middleware(Guard, settings=guard)
    return app
