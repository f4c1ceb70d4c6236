"""Talking to an upstream over HTTP (httpx): its model list, and one generation as the engine's events.

The key is read once from the variable the flag names and is only ever put in a request header: never in a
log line, an error message (an upstream's message that quotes it has it masked) or a repr."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

import httpx

from ...events import Delta, Finish, Usage
from ...settings import UPSTREAM
from ..protocol.base import ProtocolError
from ..protocol.request import GenRequest
from .decode import reader_for
from .encode import request_for
from .spec import UpstreamSpec

log = logging.getLogger("llamay.server")
_END = object()
_LIST_PATHS = {"openai": "/models", "anthropic": "/v1/models?limit=1000", "ollama": "/api/tags"}


class Upstream:
    """One --upstream: its spec, its key, the models it listed last, and one connection pool (made in the
    event loop that first uses it)."""

    def __init__(self, spec: UpstreamSpec, key: str | None = None):
        self.spec, self._key = spec, key
        self.models: list[str] = []
        self.listed_at = 0.0  # unix seconds of the last listing that answered
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"Upstream({self.spec.name!r}, {self.spec.url!r}, api={self.spec.api!r})"

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(self.spec.timeout, connect=min(UPSTREAM.connect_timeout, self.spec.timeout))
            self._client = httpx.AsyncClient(base_url=self.spec.url, timeout=timeout, headers=self._headers())
        return self._client

    def _headers(self) -> dict[str, str]:
        if self.spec.api == "anthropic":
            return {"anthropic-version": UPSTREAM.anthropic_version} | ({"x-api-key": self._key} if self._key else {})
        return {"authorization": f"Bearer {self._key}"} if self._key else {}

    def masked(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def list_models(self) -> None:
        """Reads the upstream's model list into .models; on failure keeps the last one and logs why."""
        try:
            response = await self.client().get(_LIST_PATHS[self.spec.api])
            response.raise_for_status()
            data = response.json()
            entries = data.get("models") if self.spec.api == "ollama" else data.get("data")
            self.models = [str(m.get("name") or m.get("model") or m.get("id")) for m in entries or []
                           if isinstance(m, dict)]
            self.listed_at = time.time()
        except (httpx.HTTPError, ValueError, AttributeError, TypeError) as e:
            log.warning("upstream %s: its model list could not be read: %s", self.spec.name,
                        self.masked(_describe(e)))


def _describe(e: Exception) -> str:
    if isinstance(e, httpx.HTTPStatusError):
        return f"HTTP {e.response.status_code}"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class UpstreamGeneration:
    """One request answered by an upstream, in the shape of server/stream.Generation: events() yields Delta /
    Finish; cancel() (or closing events() early) stops it and closes the upstream connection. Making one
    checks the request can be sent (ProtocolError 400); open() sends it and waits for the first event, so an
    upstream's refusal or silence is the client's HTTP status, streamed or not. prompt: filled with the
    prompt's usage once the upstream tells it."""

    def __init__(self, upstream: Upstream, model: str, req: GenRequest, prompt: Usage,
                 on_close: Callable[[], None] | None = None):
        self.upstream, self.req, self.prompt, self.on_close = upstream, req, prompt, on_close
        self.api = upstream.spec.api
        self.path, self.body = request_for(self.api, model, req)
        self.reader = reader_for(self.api, upstream.spec.name, req.n, chat=self.path != "/completions")
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None
        self._first: list = []  # the event open() waited for
        self._open = True

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self._open:
            self._open = False
            if self.on_close:
                self.on_close()

    async def open(self) -> None:
        """Sends the request and waits for the upstream's first event; its error raises here."""
        self.task = asyncio.ensure_future(self._run())
        try:
            self._first.append(await self.queue.get())
        except BaseException:
            self.cancel()
            raise
        if isinstance(self._first[0], ProtocolError):
            self.cancel()
            raise self._first[0]

    async def events(self) -> AsyncIterator[Delta | Finish]:
        if self.task is None:
            await self.open()
        try:
            while (item := self._first.pop() if self._first else await self.queue.get()) is not _END:
                if isinstance(item, ProtocolError):
                    raise item
                yield item
        finally:
            self.cancel()

    async def _run(self) -> None:
        name, timeout = self.upstream.spec.name, self.upstream.spec.timeout
        try:
            await self._exchange()
        except ProtocolError as e:
            self.queue.put_nowait(e)
        except httpx.TimeoutException:
            self.queue.put_nowait(ProtocolError(504, f"upstream '{name}' did not answer within {timeout:g} s",
                                                "timeout"))
        except httpx.HTTPError as e:
            self.queue.put_nowait(ProtocolError(502, f"upstream '{name}' cannot be reached: "
                                                f"{self.upstream.masked(_describe(e))}", "upstream"))
        except Exception as e:  # noqa: BLE001 - an answer this reader misread: the client still gets an error
            log.exception("upstream %s: its answer could not be read", name)
            self.queue.put_nowait(ProtocolError(502, f"upstream '{name}' gave an answer that could not be read: "
                                                f"{type(e).__name__}", "upstream"))
        else:
            self.queue.put_nowait(_END)

    async def _exchange(self) -> None:
        t0 = time.perf_counter_ns()
        first: list[int] = []

        def emit(events: list) -> None:
            if self.reader.prompt is not None:
                self.prompt.prompt_tokens, self.prompt.cached_tokens = (self.reader.prompt.prompt_tokens,
                                                                        self.reader.prompt.cached_tokens)
            for ev in events:
                if isinstance(ev, Delta) and not first:
                    first.append(time.perf_counter_ns())
                if isinstance(ev, Finish) and not ev.usage.total_ns:
                    _timed(ev.usage, t0, first[0] if first else None)
                self.queue.put_nowait(ev)

        async with self.upstream.client().stream("POST", self.path, json=self.body) as response:
            if response.status_code >= 400:
                await response.aread()
                raise upstream_error(self.upstream, response.status_code, response.text)
            if not self.req.stream:
                await response.aread()
                emit(self.reader.whole(_json(self.upstream, response.text)))
                return
            async for item in _items(self.upstream, response, self.api):
                emit(self.reader.item(item))
            emit(self.reader.end())


def _timed(usage: Usage, t0: int, first: int | None) -> None:
    """Durations measured here when the upstream gave none: to the first text, after it, in all."""
    now = time.perf_counter_ns()
    first = first or now
    usage.prompt_eval_ns, usage.eval_ns, usage.total_ns = first - t0, now - first, now - t0


async def _items(upstream: Upstream, response: httpx.Response, api: str) -> AsyncIterator[dict]:
    """A stream's JSON items: Ollama's lines, or the data of each server-sent event (OpenAI's up to [DONE])."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if api == "ollama":
            if line.strip():
                yield _json(upstream, line)
            continue
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            text, data = "\n".join(data), []
            if text == "[DONE]":
                return
            yield _json(upstream, text)
    if data and "\n".join(data) != "[DONE]":
        yield _json(upstream, "\n".join(data))


def _json(upstream: Upstream, text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ProtocolError(502, f"upstream '{upstream.spec.name}' answered something that is not a JSON object: "
                            f"{upstream.masked(text[:200])!r}", "upstream")
    return value


def upstream_error(upstream: Upstream, status: int, text: str) -> ProtocolError:
    """An upstream's error answer -> the error to give the client: its fault (400, 404, 429) as that
    status; a refused key, or the upstream failing, as 502; its overload as 503; its timeout as 504."""
    name = upstream.spec.name
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    message = upstream.masked(str(error.get("message") if isinstance(error, dict) else error or text[:300]).strip())
    if status in (401, 403):
        return ProtocolError(502, f"upstream '{name}' refused this server's key (HTTP {status}): {message}", "upstream")
    if status == 404:
        return ProtocolError(404, f"upstream '{name}': {message}", "not_found", "model")
    if status == 429:
        return ProtocolError(429, f"upstream '{name}' is rate limiting: {message}", "rate_limit")
    if status in (503, 529):
        return ProtocolError(503, f"upstream '{name}' is overloaded: {message}", "overloaded")
    if status in (408, 504):
        return ProtocolError(504, f"upstream '{name}' timed out (HTTP {status}): {message}", "timeout")
    if status < 500:
        return ProtocolError(400, f"upstream '{name}' refused the request (HTTP {status}): {message}")
    return ProtocolError(502, f"upstream '{name}' failed (HTTP {status}): {message}", "upstream")
