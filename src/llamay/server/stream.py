"""A prepared request's generation, streamed: its job submitted to the model's scheduler, and the engine's
pieces carried back to the event loop as Delta / Finish events (tokens -> text, the reasoning split, tool
calls read, logprobs), with Progress events and per-Delta usage for a stream that asked (llama-server's
return_progress, timings_per_token)."""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from ..chat.reasoning import ReasoningSplitter, opened
from ..engine import Done, GrammarError, Job, OutOfPages, Overloaded, Piece
from ..events import Delta, Finish, Progress, TokenLogprob, TopLogprob, Usage
from ..toolcall.formats import CallFormat
from ..toolcall.harmony import HarmonyReader, is_harmony
from ..toolcall.parser import CallParser
from .registry import Loaded
from .prepare import Prepared, adapter_choice
from .protocol.base import ProtocolError, bad_request
from .protocol.request import GenRequest


class Generation:
    """A submitted job and the way back: making one queues the job (ProtocolError 503 at once when the
    queue is full); events() yields Delta / Finish (and Progress) as they come; closing events() early, or
    cancel(), cancels the job (its pages are freed at the scheduler's next step). The caller counted the
    model busy before; the first cancel() gives that back."""

    def __init__(self, loaded: Loaded, req: GenRequest, prep: Prepared, ctx: int | None = None, on_close=None):
        self.loaded, self.req, self.on_close, self.calls = loaded, req, on_close, prep.calls
        self.thinking = opened(loaded.llm.detokenize(prep.ids[-4:]))  # the prompt opened <think>
        self.queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        try:
            lora = loaded.llm.lora_choice(adapter_choice(loaded.llm, req))
        except ValueError as e:
            raise ProtocolError(404, str(e), "not_found", "model") from None
        spec = req.llama.spec
        try:
            if spec:
                loaded.scheduler.check_mode(spec)
        except ValueError as e:
            raise ProtocolError(400, str(e), param="spec") from None
        self.job = Job(prep.ids, prep.params, lambda ev: loop.call_soon_threadsafe(self.queue.put_nowait, ev),
                       req.max_tokens, req.stop, req.n, req.top_logprobs if req.logprobs else None, ctx,
                       prep.grammar, lora=lora, spec=spec, progress=req.stream and req.llama.return_progress,
                       post_sampling=req.llama.post_sampling_probs)
        self.dones: list[Done] = []
        try:
            loaded.scheduler.submit(self.job)
        except Overloaded as e:
            raise ProtocolError(503, str(e), "overloaded") from None
        self.load_ns = 0 if loaded.load_charged else loaded.load_ns
        loaded.load_charged = True
        self._open = True

    def cancel(self):
        self.job.cancel()
        if self._open:
            self._open = False
            self.loaded.busy -= 1
            self.loaded.touch(self.req.keep_alive)
            if self.on_close:
                self.on_close()

    async def events(self) -> AsyncIterator[Delta | Finish | Progress]:
        req, tokenizer = self.req, self.loaded.llm.tokenizer
        template = req.chat.template or self.loaded.llm.metadata.get("tokenizer.chat_template", "")
        mode = req.chat.reasoning_format or "auto"
        splitters = [reader_for(template, self.calls, mode, self.thinking) for _ in range(req.n)]
        held: list[list[int]] = [[] for _ in range(req.n)]  # tokens sampled since each choice's last delta
        # each choice's usage so far, for timings_per_token (the prompt's size known once the job is admitted)
        running = [Usage() for _ in range(req.n)] if req.llama.timings_per_token else None
        try:
            while len(self.dones) < req.n:
                ev = await self.queue.get()
                if isinstance(ev, Progress):
                    yield ev
                    continue
                if isinstance(ev, Piece):
                    content, reasoning, calls = splitters[ev.index].feed(ev.text)
                    logprobs = [_logprob(tokenizer, ev)] if ev.logprob is not None else []
                    held[ev.index] += [ev.token] if ev.token >= 0 else []
                    usage = self._so_far(running[ev.index], ev) if running else None
                    if content or reasoning or logprobs or calls:
                        yield Delta(ev.index, content, reasoning, logprobs, calls, held[ev.index], usage)
                        held[ev.index] = []
                    continue
                if ev.reason == "error":
                    raise _engine_error(ev.error)
                if ev.reason == "cancelled":
                    raise ProtocolError(503, "the server is shutting down", "overloaded")
                self.dones.append(ev)
                reader = splitters[ev.index]
                content, reasoning, calls = reader.flush()
                if content or reasoning or calls or held[ev.index]:  # tokens that showed no text are still output
                    yield Delta(ev.index, content, reasoning, tool_calls=calls, tokens=held[ev.index])
                usage = Usage(ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens, self.load_ns,
                              ev.prompt_ns, ev.eval_ns, ev.total_ns + self.load_ns, ev.drafted_tokens,
                              ev.accepted_tokens, ev.disk_tokens, ev.shared_tokens)
                reason = "tool_calls" if reader.calls and ev.reason == "stop" else ev.reason
                yield Finish(ev.index, reason, usage, ev.tokens, ev.stop_sequence)
        finally:
            self.cancel()  # a no-op for the job once every choice is done

    def _so_far(self, usage: Usage, ev: Piece) -> Usage:
        """usage updated by a choice's piece -> a copy of it (a Delta's own)."""
        if ev.token >= 0:
            usage.prompt_tokens, usage.cached_tokens = self.job.prompt_tokens or 0, self.job.cached_tokens or 0
            usage.completion_tokens += 1
            usage.prompt_eval_ns, usage.eval_ns = ev.prompt_ns, ev.eval_ns
        return dataclasses.replace(usage)


def reader_for(template_source: str, calls: CallFormat | None, reasoning_format: str = "auto",
               thinking: bool = False):
    """One choice's output reader: harmony messages for a harmony template (gpt-oss), else the reasoning
    split (chat/reasoning.py's modes; thinking: the prompt opened it) then the call format's parser."""
    if is_harmony(template_source):
        return HarmonyReader()
    return _Reader(template_source, calls, reasoning_format, thinking)


class _Reader:
    """One choice's output text -> (content, reasoning, tool-call deltas): the reasoning split first, then
    the content read for calls."""

    def __init__(self, template_source: str, calls: CallFormat | None, reasoning_format: str, thinking: bool):
        self.splitter = ReasoningSplitter(template_source, reasoning_format, thinking)
        self.parser = CallParser(calls) if calls is not None else None

    @property
    def calls(self) -> int:
        return self.parser.calls if self.parser else 0

    def feed(self, text: str) -> tuple[str, str, list]:
        content, reasoning = self.splitter.feed(text)
        if self.parser is None:
            return content, reasoning, []
        content, calls = self.parser.feed(content)
        return content, reasoning, calls

    def flush(self) -> tuple[str, str, list]:
        content, reasoning = self.splitter.flush()
        if self.parser is None:
            return content, reasoning, []
        content, calls = self.parser.feed(content)
        tail, more = self.parser.end()
        return content + tail, reasoning, calls + more


def _engine_error(error: Exception | None) -> ProtocolError:
    if isinstance(error, OutOfPages):
        return ProtocolError(503, f"out of KV cache memory: {error}", "overloaded")
    if isinstance(error, GrammarError):  # the request's own grammar gave out; the server is fine
        return bad_request(f"the grammar failed during generation: {error}", "response_format")
    return ProtocolError(500, f"generation failed: {type(error).__name__}: {error}", "internal")


def _logprob(tokenizer, ev: Piece) -> TokenLogprob:
    def text(tok: int) -> tuple[str, list[int]]:
        raw = tokenizer.piece(tok)
        return raw.decode("utf-8", "replace"), list(raw)

    token, raw = text(ev.token)
    top = [TopLogprob(*text(t)[:1], lp, text(t)[1], t) for t, lp in ev.top or []]
    return TokenLogprob(token, ev.logprob, raw, top, ev.token)
