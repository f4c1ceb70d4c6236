"""What every route shares: reading JSON, answering errors in the route's own API shape, running a
generation to a streamed or whole response, and noticing clients that go away."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..events import Finish, Usage
from ..toolcall.plan import ToolPlan
from . import requestlog
from .generation import Generation, prepare, with_server_defaults
from .jsonbody import parse_body
from .models import Loaded
from .protocol.base import GenRequest, Output, ProtocolError, ResponseMeta, merge_usage
from .slots import SlotTable

DISCONNECT_POLL_S = 0.25
CLIENT_GONE = 499  # nginx's "client closed request": what a log shows for an answer nobody was there to read
log = logging.getLogger("llamay.server")


async def read_bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes limit bytes (stops reading there)."""
    parts, seen = [], 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


async def read_json(request: Request, array: bool = False) -> dict | list:
    return parse_body(await request.body(), array)


async def off_loop(request: Request, fn: Callable, *args):
    """fn(*args, cancel) in a worker thread; cancel (a threading.Event) is set when the client disconnects
    meanwhile, or this coroutine is cancelled, so a long render stops instead of running for nobody."""
    cancel = threading.Event()
    task = asyncio.ensure_future(asyncio.to_thread(fn, *args, cancel))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                cancel.set()
        return task.result()
    finally:
        cancel.set()


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def api(proto):
    """Route decorator: a ProtocolError (or an unexpected failure) becomes proto.error_body at its status."""
    def wrap(route):
        @functools.wraps(route)
        async def handler(*args, **kwargs):
            try:
                return await route(*args, **kwargs)
            except ProtocolError as e:
                return error_response(proto, e)
            except Exception as e:  # a bug: still answered in the API's shape, not as a plain-text page
                log.exception("unexpected error in %s", route.__name__)
                return error_response(proto, internal_error(e))
        return handler
    return wrap


def internal_error(e: Exception) -> ProtocolError:
    return ProtocolError(500, f"internal error: {type(e).__name__}: {e}", "internal")


def error_response(proto, err: ProtocolError) -> JSONResponse:
    headers = {"x-should-retry": "true", "retry-after": "1"} if err.status == 503 else None
    status = proto.error_status(err) if hasattr(proto, "error_status") else err.status  # Anthropic: 529
    return JSONResponse(proto.error_body(err), status_code=status, headers=headers)


def new_meta(prefix: str, model: str) -> ResponseMeta:
    now = time.time_ns()
    return ResponseMeta(f"{prefix}{uuid.uuid4().hex[:24]}", now // 10**9, model, now)


@dataclass
class RunOptions:
    """How Responder.run serves one generation, beyond the request itself."""
    loaded: Loaded | None = None  # the model, when the route holds it already (else looked up by name)
    ctx: int | None = None  # a named context's engine context to continue; None: a fresh sequence
    extra: int = 0  # tokens already in that context before the prompt
    tools: ToolPlan | None = None  # the tool plan of a context's chat (the route rendered it whole)
    prompt_usage: bool = False  # make_output(req, meta, usage) gets the prompt's size before generating
    on_finish: Callable[[list[Finish]], None] | None = None  # once every choice finished
    on_close: Callable[[], None] | None = None  # once the generation is over, or at once if it never started


class Responder:
    """Runs a request's generation to its API's response, with the app's registry and counters (set on
    app.state.responder)."""

    def __init__(self, registry, metrics):
        self.registry, self.metrics = registry, metrics
        self.slots = SlotTable(registry.settings.concurrency)

    async def run(self, request: Request, proto, req: GenRequest, make_output: Callable[..., Output],
                  id_prefix: str, media_type: str, opts: RunOptions = RunOptions()) -> Response:
        """Cache hits are known only at the end: with opts.prompt_usage the output gets Usage.prompt_tokens."""
        out, events, gen, req = await self.start(request, req, make_output, id_prefix, opts)
        if req.stream:
            return StreamingResponse(_frames(out, events, gen), media_type=media_type,
                                     headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        if not await _collect(request, out, events, gen):
            return Response(status_code=CLIENT_GONE)  # nobody reads it; no traceback in the log either
        return JSONResponse(out.body())

    async def run_all(self, request: Request, reqs: list[GenRequest], make_output: Callable[..., Output],
                      id_prefix: str, opts: RunOptions = RunOptions()) -> list[Output] | None:
        """Several generations at once, each collected whole (llama-server's batch of prompts;
        make_output(i, req, meta, ...) for the i-th) -> their outputs in order; None when the client left."""
        started = []
        try:
            for i, req in enumerate(reqs):
                started.append(await self.start(request, req, functools.partial(make_output, i), id_prefix, opts))
        except BaseException:
            for _, _, gen, _ in started:
                gen.cancel()
            raise
        tasks = [asyncio.ensure_future(_collect(request, out, events, gen)) for out, events, gen, _ in started]
        try:
            done = await asyncio.gather(*tasks)
        finally:  # one failed: the others stop too
            for task, (_, _, gen, _) in zip(tasks, started):
                task.cancel()
                gen.cancel()
        return [out for out, *_ in started] if all(done) else None

    async def start(self, request: Request, req: GenRequest, make_output: Callable[..., Output], id_prefix: str,
                    opts: RunOptions) -> tuple[Output, AsyncIterator, Generation, GenRequest]:
        """Prepares and submits one generation -> (its output, its events, the generation, the request as
        run: with the server's and the model's defaults). Every generation takes a slot (slots.py)."""
        slot = None

        def close():
            if slot is not None:
                self.slots.release(slot)
            if opts.on_close:
                opts.on_close()

        try:
            loaded = opts.loaded or await self.registry.get(req.model, req.keep_alive)
        except BaseException:
            close()
            raise
        loaded.busy += 1  # not unloaded from here on; the Generation gives it back when it ends
        try:
            req = with_server_defaults(req, self.registry.settings)
            prep = await off_loop(request, prepare, loaded, req, opts.extra, opts.tools)
            req = prep.req
            slot = self.slots.take(loaded.info.name, prep.ids, req.options.get("id_slot"))
            req.options["id_slot"] = slot.id
            meta = new_meta(id_prefix, self.registry.reply_name(req.model, loaded.info.name))
            out = make_output(req, meta, Usage(len(prep.ids) + opts.extra)) if opts.prompt_usage \
                else make_output(req, meta)
            gen = Generation(loaded, req, prep, opts.ctx, close)
        except BaseException:
            loaded.busy -= 1
            close()
            raise
        self.metrics.requests += 1
        requestlog.note(request, meta.model)
        finishes: list[Finish] = []

        async def events() -> AsyncIterator:
            async for ev in gen.events():
                if isinstance(ev, Finish):
                    finishes.append(ev)
                    self.metrics.count(ev.usage)
                    if len(finishes) == req.n:
                        requestlog.note(request, meta.model, merge_usage(finishes))
                        self.slots.finish(slot, req, min(finishes, key=lambda f: f.index), gen.job.lora)
                        if opts.on_finish:
                            opts.on_finish(finishes)
                yield ev

        return out, events(), gen, req


async def _frames(out: Output, events: AsyncIterator, gen: Generation) -> AsyncIterator[str]:
    """Starlette cancels this generator when the client disconnects; the finally cancels the job."""
    try:
        async for ev in events:
            for frame in out.feed(ev):
                yield frame
        for frame in out.end():
            yield frame
    except ProtocolError as e:
        for frame in out.fail(e):
            yield frame
    except Exception as e:  # a bug: the client still gets the API's error frame, not a cut stream
        log.exception("unexpected error while streaming")
        for frame in out.fail(internal_error(e)):
            yield frame
    finally:
        gen.cancel()


async def _collect(request: Request, out: Output, events: AsyncIterator, gen: Generation) -> bool:
    """Feeds every event to out -> True; a client that disconnects meanwhile cancels the generation -> False."""
    async def consume():
        async for ev in events:
            out.feed(ev)

    task = asyncio.create_task(consume())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return False
        await task
        return True
    finally:
        gen.cancel()
