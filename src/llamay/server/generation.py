"""From a GenRequest to a stream of Delta / Finish events: render the prompt, submit a job to the model's
scheduler, and carry its output back to the event loop (tokens -> text, reasoning split, logprobs)."""
from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..chat import ChatTemplate, ChatTemplateError, template_for
from ..chat.prompt import text_ids
from ..chat.gotemplate import GoTemplateError, render_go
from ..chat.reasoning import ReasoningSplitter
from ..engine import ContextOverflow, Done, GrammarError, Job, OutOfPages, Overloaded, Piece, SamplingParams
from ..toolcall.formats import CallFormat
from ..toolcall.harmony import HarmonyReader, is_harmony
from ..toolcall.parser import CallParser
from ..toolcall.plan import ToolPlan
from ..toolcall.plan import plan as plan_tools
from ..events import Delta, Finish, TokenLogprob, TopLogprob, Usage
from .models import Loaded, split_adapters
from .protocol.base import SAMPLING_KEYS, GenRequest, ProtocolError, bad_request
from .protocol.llamacpp_params import mixed_ids

if TYPE_CHECKING:
    from ..engine import Grammar


@dataclass
class Prepared:
    req: GenRequest  # the request with the model's defaults applied (a new one; the parsed one is unchanged)
    ids: list[int]  # the prompt's tokens (appended to the context when continuing one)
    params: SamplingParams
    grammar: Grammar | None = None  # constrains the output
    calls: CallFormat | None = None  # the output is read for tool calls in this format


def adapter_choice(llm, req: GenRequest):
    """The request's LoRA choice (LLM.lora_choice): model NAME@ADAPTER,... or llama-server's `lora` ids and
    scales (ids in name order, as GET /lora-adapters lists them); None: the default."""
    named, by_id = split_adapters(req.model)[1], req.options.get("lora")
    if by_id is None:
        return named
    if named is not None:
        raise bad_request("choose LoRA adapters by model NAME@ADAPTER or by 'lora', not both", "lora")
    names = sorted(a.name for a in llm.loras)
    for i, _ in by_id:
        if not 0 <= i < len(names):
            raise bad_request(f"lora id {i} names no adapter (ids 0..{len(names) - 1})", "lora")
    return {names[i]: scale for i, scale in by_id}


def grammar_spec(fmt, grammar_text: str | None) -> tuple[str, object] | None:
    """Each API's structured-output request -> (kind, source) for llamay.grammar, or None.
    OpenAI response_format {type: json_object | json_schema {schema} (or llama-server's flat schema;
    llama-server's json_object {schema} constrains to the schema)}, Ollama format ("json" or a schema),
    Anthropic output_config.format (the schema), a GBNF `grammar`."""
    if grammar_text:
        return "gbnf", grammar_text
    if fmt is None or fmt == "" or fmt == {}:
        return None
    if fmt == "json":
        return "json_object", None
    if not isinstance(fmt, dict):
        raise bad_request(f"format must be \"json\" or a JSON schema object, got {fmt!r}", "format")
    if fmt.get("type") == "json_object":
        return ("json_schema", fmt["schema"]) if "schema" in fmt else ("json_object", None)
    if fmt.get("type") == "json_schema" and ("json_schema" in fmt or "schema" in fmt):
        nested = fmt.get("json_schema")
        schema = nested.get("schema", {}) if isinstance(nested, dict) else fmt["schema"]
        return "json_schema", schema
    return "json_schema", fmt


def compile_grammar(loaded: Loaded, req: GenRequest, tools: ToolPlan | None = None):
    """Tool calls' grammar when tools are in play, else the request's grammar or structured-output format,
    else the server's --grammar-file."""
    spec = ("lark", tools.lark) if tools is not None and tools.lark else \
        grammar_spec(req.format, req.options.get("grammar")) or grammar_spec(None, loaded.default_grammar)
    if spec is None:
        return None
    from ..engine import Grammar, GrammarBusy
    try:
        return Grammar.compile(loaded.llm.tokenizer, *spec)
    except GrammarBusy as e:  # every compile slot is taken (by hostile grammars, maybe): try again later
        raise ProtocolError(503, str(e), "overloaded") from None
    except GrammarError as e:
        param = "tools" if spec[0] == "lark" else "response_format"
        raise bad_request(f"the grammar or schema cannot be compiled: {e}", param) from None


def render(loaded: Loaded, req: GenRequest, cancel: threading.Event | None = None) -> list[int]:
    return render_plan(loaded, req, cancel)[0]


def render_plan(loaded: Loaded, req: GenRequest,
                cancel: threading.Event | None = None) -> tuple[list[int], ToolPlan | None]:
    """The prompt's token ids (raw text/ids as they are, else through the model's chat template) and the
    tool-call plan of a chat with tools. cancel, once set, stops a template render (the client left)."""
    llm = loaded.llm
    _check_text_fits(llm, req)
    if req.raw or (req.messages is None and isinstance(req.prompt, list)):
        ids = mixed_ids(req.prompt or "", lambda text, first: llm.tokenize(text, first, parse_special=True))
        return list(req.context or []) + ids, None
    if req.template is not None and req.messages is None:  # Ollama /api/generate's own template
        try:
            text = render_go(req.template, req.system or "", req.prompt or "")
        except GoTemplateError as e:
            raise bad_request(str(e), "template") from None
        return list(req.context or []) + llm.tokenize(text, parse_special=True), None
    messages = list(req.messages if req.messages is not None else [{"role": "user", "content": req.prompt or ""}])
    if req.system is not None:
        messages = [{"role": "system", "content": req.system}] + [m for m in messages if m["role"] != "system"]
    template, tools = chat_plan(loaded, req, messages)
    ids = text_ids(template, llm.tokenizer, render_text(template, tools, req, cancel=cancel))
    if req.context:
        bos = llm.tokenizer.bos_id
        ids = list(req.context) + (ids[1:] if ids and ids[0] == bos else ids)
    return ids, tools


def chat_plan(loaded: Loaded, req: GenRequest, messages: list[dict]) -> tuple[ChatTemplate, ToolPlan]:
    """The chat template (the server's --chat-template, else the model's) and the tool plan for messages."""
    llm = loaded.llm
    try:
        template = template_for(llm.metadata, llm.tokenizer, req.options.get("chat_template"))
        return template, plan_tools(template.source, messages, req.tools, req.options, llm.tokenizer)
    except ChatTemplateError as e:
        raise bad_request(f"the model's chat template cannot be used: {e}", "messages") from None
    except ValueError as e:
        raise bad_request(str(e), "tool_choice") from None


RENDER_ARGS = frozenset({"messages", "add_generation_prompt", "tools", "cancel"})  # ChatTemplate.render's own


def render_text(template: ChatTemplate, tools: ToolPlan, req: GenRequest, add_generation_prompt: bool = True,
                cancel: threading.Event | None = None) -> str:
    """The template's text for the plan's messages and tools (with the request's chat_template_kwargs)."""
    kwargs = req.options.get("chat_template_kwargs", {})
    taken = sorted(set(kwargs) & RENDER_ARGS)
    if taken:
        raise bad_request(f"'chat_template_kwargs' may not set {', '.join(taken)}", "chat_template_kwargs")
    try:
        return template.render(tools.messages, add_generation_prompt, tools.tools, cancel, **kwargs)
    except ChatTemplateError as e:
        raise bad_request(f"the model's chat template refused the messages: {e}", "messages") from None


def check_prompt(llm, ids: list[int], extra: int, param: str) -> None:
    """The engine's checks as the API's errors: the prompt (after `extra` tokens already in a context) leaves
    room for a reply (400 context_length) and every id is in the vocabulary (400)."""
    try:
        llm.check_fits(len(ids) + extra, room=1)
        llm.check_vocab(ids)
    except ContextOverflow as e:
        raise context_error(str(e), len(ids) + extra, llm.n_ctx, param) from None
    except ValueError as e:
        raise bad_request(str(e), "prompt") from None


TEXT_SLACK = 2  # whitespace a tokenizer may fold away: refuse only text twice too long to ever fit


def context_error(message: str, n_prompt: int, n_ctx: int, param: str) -> ProtocolError:
    return ProtocolError(400, message, "context_length", param, {"n_prompt_tokens": n_prompt, "n_ctx": n_ctx})


def _check_text_fits(llm, req: GenRequest) -> None:
    """A 400 before tokenizing text that cannot fit the context whatever its tokens: a token stands for at
    most max_piece_bytes of text (so its n_prompt_tokens is that lower bound). Tokenizing megabytes costs
    seconds and gigabytes another client waits for."""
    pieces = req.prompt if isinstance(req.prompt, list) else [req.prompt]
    texts = [p for p in pieces if isinstance(p, str)] + [req.system or ""]
    texts += [m.get("content") for m in req.messages or [] if isinstance(m.get("content"), str)]
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    if n_bytes <= TEXT_SLACK * llm.n_ctx:
        return
    max_piece = llm.tokenizer.max_piece_bytes
    if n_bytes > TEXT_SLACK * llm.n_ctx * max_piece:
        raise context_error(f"the prompt is {n_bytes} bytes of text, more than the context of {llm.n_ctx} tokens "
                            "can hold (nothing was truncated)", -(-n_bytes // max_piece), llm.n_ctx, "messages")


def with_model_defaults(req: GenRequest, stored) -> GenRequest:
    """A new request with a stored model's layers applied as Ollama applies them: its system prompt when
    the request has none, its stop strings added, and (Ollama requests, which say what they set) its params
    for what is unset. The request given is not changed."""
    if stored is None:
        return req
    req = dataclasses.replace(req, sampling=dict(req.sampling))
    has_system = req.system is not None or any(m.get("role") == "system" for m in req.messages or [])
    if stored.system and not has_system and not req.raw:
        req.system = stored.system
    if stored.template and req.template is None and req.messages is None and not req.raw:
        try:  # a plain Go template layer serves /api/generate; others (range, if) leave the GGUF's own
            render_go(stored.template, "", "")
            req.template = stored.template
        except GoTemplateError:
            pass
    params = stored.params or {}
    stops = params.get("stop") or []
    req.stop = list(dict.fromkeys(list(req.stop) + ([stops] if isinstance(stops, str) else list(stops))))
    if req.options_set is not None:
        unset = set(SAMPLING_KEYS) - req.options_set
        req.sampling.update({k: params[k] for k in unset if k in params})
        if "num_predict" not in req.options_set and (params.get("num_predict") or 0) > 0:
            req.max_tokens = params["num_predict"]
    return req


def with_server_defaults(req: GenRequest, settings) -> GenRequest:
    """A new request with what `llamay serve` was started with (settings: server.models.Settings): its
    sampling defaults for the fields the request did not set itself, its -n for a request that set no
    max_tokens, its --chat-template and --reasoning-format unless the request chose."""
    sent = req.sent if req.sent is not None else req.options_set if req.options_set is not None else req.sampling
    fill = {k: v for k, v in settings.sampling.items() if k not in sent}
    options = {"reasoning_format": settings.reasoning_format, **req.options}
    if settings.chat_template is not None:
        options.setdefault("chat_template", settings.chat_template)
    return dataclasses.replace(req, sampling={**req.sampling, **fill}, options=options,
                               max_tokens=settings.n_predict if req.max_tokens is None else req.max_tokens)


def bind_sampling(llm, req: GenRequest) -> dict:
    """req.sampling with what needs the vocabulary: llama-server's logit biases by text (options
    logit_bias: (token id or text, bias) pairs, a text biasing each of its tokens) and ignore_eos (every
    end-of-generation token banned)."""
    bias = dict(req.sampling.get("logit_bias") or {})
    for key, value in req.options.get("logit_bias", ()):
        for tok in [key] if isinstance(key, int) else llm.tokenize(key, add_special=False):
            bias[tok] = value
    if req.options.get("ignore_eos"):
        bias.update(dict.fromkeys(llm.tokenizer.eog_ids, -math.inf))
    return {**req.sampling, "logit_bias": bias} if bias else req.sampling


def prepare(loaded: Loaded, req: GenRequest, extra: int = 0, tools: ToolPlan | None = None,
            cancel: threading.Event | None = None) -> Prepared:
    """Renders and checks the prompt (extra: tokens already in a continued context; tools: the plan of a
    context's chat, which the route rendered whole)."""
    req = with_model_defaults(req, loaded.stored)
    ids, own_tools = render_plan(loaded, req, cancel)
    tools = own_tools or tools
    llm = loaded.llm
    if not ids and not extra:
        raise bad_request("the prompt is empty", "prompt")
    check_prompt(llm, ids, extra, "messages")
    try:
        params = SamplingParams(**bind_sampling(llm, req))
        params.check(llm.n_vocab)
    except (TypeError, ValueError) as e:
        raise bad_request(f"sampling: {e}") from None
    return Prepared(req, ids, params, compile_grammar(loaded, req, tools), tools.fmt if tools else None)


class Generation:
    """A submitted job and the way back: making one queues the job (ProtocolError 503 at once when the
    queue is full); events() yields Delta / Finish as they come; closing events() early, or cancel(),
    cancels the job (its pages are freed at the scheduler's next step). The caller counted the model busy
    before; the first cancel() gives that back."""

    def __init__(self, loaded: Loaded, req: GenRequest, prep: Prepared, ctx: int | None = None, on_close=None):
        self.loaded, self.req, self.on_close, self.calls = loaded, req, on_close, prep.calls
        self.queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        try:
            lora = loaded.llm.lora_choice(adapter_choice(loaded.llm, req))
        except ValueError as e:
            raise ProtocolError(404, str(e), "not_found", "model") from None
        spec = req.options.get("spec")
        try:
            if spec:
                loaded.scheduler.check_mode(spec)
        except ValueError as e:
            raise ProtocolError(400, str(e), param="spec") from None
        self.job = Job(prep.ids, prep.params, lambda ev: loop.call_soon_threadsafe(self.queue.put_nowait, ev),
                       req.max_tokens, req.stop, req.n, req.top_logprobs if req.logprobs else None, ctx,
                       prep.grammar, lora=lora, spec=spec)
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

    async def events(self) -> AsyncIterator[Delta | Finish]:
        req, tokenizer = self.req, self.loaded.llm.tokenizer
        template = req.options.get("chat_template") or self.loaded.llm.metadata.get("tokenizer.chat_template", "")
        mode = req.options.get("reasoning_format", "auto")
        splitters = [reader_for(template, self.calls, mode) for _ in range(req.n)]
        held: list[list[int]] = [[] for _ in range(req.n)]  # tokens sampled since each choice's last delta
        try:
            while len(self.dones) < req.n:
                ev = await self.queue.get()
                if isinstance(ev, Piece):
                    content, reasoning, calls = splitters[ev.index].feed(ev.text)
                    logprobs = [_logprob(tokenizer, ev)] if ev.logprob is not None else []
                    held[ev.index] += [ev.token] if ev.token >= 0 else []
                    if content or reasoning or logprobs or calls:
                        yield Delta(ev.index, content, reasoning, logprobs, calls, held[ev.index])
                        held[ev.index] = []
                    continue
                if ev.reason == "error":
                    raise _engine_error(ev.error)
                if ev.reason == "cancelled":
                    raise ProtocolError(503, "the server is shutting down", "overloaded")
                self.dones.append(ev)
                reader = splitters[ev.index]
                content, reasoning, calls = reader.flush()
                if content or reasoning or calls:
                    yield Delta(ev.index, content, reasoning, tool_calls=calls, tokens=held[ev.index])
                usage = Usage(ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens, self.load_ns,
                              ev.prompt_ns, ev.eval_ns, ev.total_ns + self.load_ns, ev.drafted_tokens,
                              ev.accepted_tokens, ev.disk_tokens, ev.shared_tokens)
                reason = "tool_calls" if reader.calls and ev.reason == "stop" else ev.reason
                yield Finish(ev.index, reason, usage, ev.tokens, ev.stop_sequence)
        finally:
            self.cancel()  # a no-op for the job once every choice is done


def reader_for(template_source: str, calls: CallFormat | None, reasoning_format: str = "auto"):
    """One choice's output reader: harmony messages for a harmony template (gpt-oss), else the reasoning
    split (chat/reasoning.py's modes) then the call format's parser."""
    return HarmonyReader() if is_harmony(template_source) else _Reader(template_source, calls, reasoning_format)


class _Reader:
    """One choice's output text -> (content, reasoning, tool-call deltas): the reasoning split first, then
    the content read for calls."""

    def __init__(self, template_source: str, calls: CallFormat | None, reasoning_format: str):
        self.splitter = ReasoningSplitter(template_source, reasoning_format)
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
