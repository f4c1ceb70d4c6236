"""Running a route's request to its API's response: the model found or loaded, the request prepared
(prepare.py) on a worker thread, a slot taken (slots.py), the generation streamed (stream.py) into the
API's Output, whole or as frames (http.py)."""
from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..events import Finish, Usage
from ..toolcall.plan import ToolPlan
from . import requestlog
from .http import CLIENT_GONE, collect, frames, off_loop
from .registry import Loaded
from .prepare import prepare, with_server_defaults
from .protocol.base import Output, ResponseMeta, merge_usage
from .protocol.request import GenRequest
from .slots import SlotTable
from .stream import Generation
from .upstream import UpstreamGeneration


def new_meta(prefix: str, model: str, slot: int = -1) -> ResponseMeta:
    now = time.time_ns()
    return ResponseMeta(f"{prefix}{uuid.uuid4().hex[:24]}", now // 10**9, model, now, slot)


@dataclass
class RunOptions:
    """How Responder.run serves one generation, beyond the request itself."""
    loaded: Loaded | None = None  # the model, when the route holds it already (else looked up by name)
    ctx: int | None = None  # a named context's engine context to continue; None: a fresh sequence
    extra: int = 0  # tokens already in that context before the prompt
    tools: ToolPlan | None = None  # the tool plan of a context's chat (the route rendered it whole)
    prompt_usage: bool = False  # make_output(req, meta, usage) gets the prompt's size (and cached part) early
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
        """With opts.prompt_usage the output gets a Usage of the prompt's size, its cached_tokens set once the
        job is admitted (before the first event)."""
        out, events, gen, req = await self.start(request, req, make_output, id_prefix, opts)
        if req.stream:
            return StreamingResponse(frames(out, events, gen.cancel), media_type=media_type,
                                     headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        if not await collect(request, out, events, gen.cancel):
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
        tasks = [asyncio.ensure_future(collect(request, out, events, gen.cancel)) for out, events, gen, _ in started]
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
        run: with the server's and the model's defaults). Every generation takes a slot (slots.py), which
        its ResponseMeta names."""
        found = self.registry.upstreams.find(req.model, self.registry.has) if opts.loaded is None else None
        if found is not None:
            return await self._start_upstream(request, req, make_output, id_prefix, opts, found)
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
            slot = self.slots.take(loaded.info.name, prep.ids, req.llama.id_slot)
            meta = new_meta(id_prefix, self.registry.reply_name(req.model, loaded.info.name), slot.id)
            prompt = Usage(len(prep.ids) + opts.extra)
            out = make_output(req, meta, prompt) if opts.prompt_usage else make_output(req, meta)
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
                prompt.cached_tokens = gen.job.cached_tokens or 0  # known from admission on
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

    async def _start_upstream(self, request: Request, req: GenRequest, make_output: Callable[..., Output], id_prefix: str,
                        opts: RunOptions, found) -> tuple[Output, AsyncIterator, UpstreamGeneration, GenRequest]:
        """start() for a model an upstream answers (serve --upstream): no slot, no local defaults; the prompt's
        usage is filled in once the upstream tells it."""
        upstream, model = found
        prompt = Usage()
        try:
            gen = UpstreamGeneration(upstream, model, req, prompt, opts.on_close)
        except BaseException:
            if opts.on_close:
                opts.on_close()
            raise
        await gen.open()  # the upstream's error before its first event is this request's status (it closes)
        meta = new_meta(id_prefix, req.model)
        out = make_output(req, meta, prompt) if opts.prompt_usage else make_output(req, meta)
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
                        if opts.on_finish:
                            opts.on_finish(finishes)
                yield ev

        return out, events(), gen, req
