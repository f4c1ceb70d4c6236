"""One log line per request (`llamay serve` without --quiet), written when the response ends (a stream's
last byte, or the client leaving):

    2026-12-01 23:40:01 openai POST /v1/chat/completions smollm2:135m 200 prompt=25 cached=20 gen=8 412ms

Routes that generate put the model's name and the request's Usage on the request's state (note()); other
routes show '-' for what they did not note. The Studio's requests are labelled 'studio'; its periodic polls
are logged only when they fail."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ..events import Usage

API_PREFIXES = (("/v1/messages", "anthropic"), ("/api/", "ollama"), ("/v1/contexts", "contexts"),
                ("/v1/", "openai"))
STUDIO_POLLS = ("/studio/api/contexts", "/studio/api/cache", "/metrics")  # GETs the open Studio repeats
STUDIO_MARK = (b"x-llamay-client", b"studio")  # the header the Studio's page sends on its /metrics poll


def api_of(path: str) -> str:
    """The API a path belongs to, as the log names it (llama-server's own routes: 'llama-server')."""
    if path == "/":
        return "ollama"
    for prefix, name in API_PREFIXES:
        if path.startswith(prefix):
            return name
    return "openai" if path in ("/chat/completions", "/responses", "/embeddings", "/models") else "llama-server"


def from_studio(scope) -> bool:
    """The Studio's page, assets and routes, or a request its page marks."""
    path = scope["path"]
    return path == "/studio" or path.startswith("/studio/") or STUDIO_MARK in scope.get("headers", ())


def note(request, model: str, usage: Usage | None = None):
    """What a route tells the log about its request: the model that answered and, once known, its usage."""
    request.state.log_model = model
    if usage is not None:
        request.state.log_usage = usage


def format_line(when: float, method: str, path: str, status: int, ms: float, model: str | None,
                usage: Usage | None, api: str | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    tokens = "" if usage is None else \
        f" prompt={usage.prompt_tokens} cached={usage.cached_tokens} gen={usage.completion_tokens}"
    return f"{stamp} {api or api_of(path)} {method} {path} {model or '-'} {status}{tokens} {ms:.0f}ms"


class RequestLog:
    """ASGI middleware: app.add_middleware(RequestLog, write=...). write(line) gets each request's line."""

    def __init__(self, app, write: Callable[[str], None] | None = None):
        self.app = app
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0, when = time.perf_counter(), time.time()
        status = [499]  # nginx's "client closed request" until a response starts
        studio = from_studio(scope)
        poll = studio and scope["method"] == "GET" and scope["path"] in STUDIO_POLLS
        logged = [False]

        def log():
            if not logged[0]:
                logged[0] = True
                if poll and status[0] < 400:
                    return
                state = scope.get("state", {})
                self.write(format_line(when, scope["method"], scope["path"], status[0],
                                       1000 * (time.perf_counter() - t0), state.get("log_model"),
                                       state.get("log_usage"), "studio" if studio else None))

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                log()

        try:
            await self.app(scope, receive, sending)
        finally:
            log()
