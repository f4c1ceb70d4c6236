"""A GenRequest made ready to run: the server's and the model's defaults applied, the prompt rendered and
checked (render.py), SamplingParams built, the grammar compiled, the LoRA choice read."""
from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..chat.gotemplate import GoTemplateError, render_go
from ..engine import GrammarError, SamplingParams
from ..toolcall.formats import CallFormat
from ..toolcall.plan import ToolPlan
from .registry import Loaded, split_adapters
from .protocol.base import ProtocolError, bad_request
from .protocol.request import GenRequest, Sampling
from .render import check_prompt, render_plan

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
    named, by_id = split_adapters(req.model)[1], req.llama.lora
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
        grammar_spec(req.format, req.llama.grammar) or grammar_spec(None, loaded.default_grammar)
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


def with_model_defaults(req: GenRequest, stored) -> GenRequest:
    """A new request with a stored model's layers applied as Ollama applies them: its system prompt when
    the request has none, its stop strings added, and (Ollama requests, which say what they set) its params
    under what the request set. The request given is not changed."""
    if stored is None:
        return req
    req = dataclasses.replace(req)
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
    if req.ollama is not None:
        req.sampling_defaults = Sampling.of(params).over(req.sampling_defaults)
        if req.ollama.num_predict is None and (params.get("num_predict") or 0) > 0:
            req.max_tokens = params["num_predict"]
    return req


def with_server_defaults(req: GenRequest, settings) -> GenRequest:
    """A new request with what `llamay serve` was started with (settings: server.registry.Settings): its
    sampling flags under what the request set, its -n for a request that set no max_tokens, its
    --chat-template, --reasoning-format, --reasoning (enable_thinking) and -v (verbose) unless the request
    chose."""
    chat = req.chat
    kwargs = chat.template_kwargs
    if settings.enable_thinking is not None and "enable_thinking" not in kwargs:
        kwargs = {**kwargs, "enable_thinking": settings.enable_thinking}
    chat = dataclasses.replace(chat, template=settings.chat_template if chat.template is None else chat.template,
                               reasoning_format=chat.reasoning_format or settings.reasoning_format,
                               template_kwargs=kwargs)
    llama = req.llama if req.llama.verbose is not None else dataclasses.replace(req.llama, verbose=settings.verbose)
    return dataclasses.replace(req, sampling_defaults=Sampling.of(settings.sampling).over(req.sampling_defaults),
                               chat=chat, max_tokens=settings.n_predict if req.max_tokens is None else req.max_tokens,
                               llama=llama)


def sampling_params(llm, req: GenRequest) -> SamplingParams:
    """The engine's SamplingParams for req.run_sampling(), with what needs the vocabulary: llama-server's
    logit biases by text (a text biases each of its tokens) and ignore_eos (every end-of-generation
    token banned)."""
    run = req.run_sampling()
    bias = dict(run.logit_bias or {})
    for key, value in req.llama.logit_bias:
        for tok in [key] if isinstance(key, int) else llm.tokenize(key, add_special=False):
            bias[tok] = value
    if req.llama.ignore_eos:
        bias.update(dict.fromkeys(llm.tokenizer.eog_ids, -math.inf))
    seed = None if run.seed is None or run.seed < 0 else run.seed  # < 0: a fresh one
    return SamplingParams(**{**run.given(), "seed": seed, "logit_bias": bias or None})


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
        params = sampling_params(llm, req)
        params.check(llm.n_vocab)
    except (TypeError, ValueError) as e:
        raise bad_request(f"sampling: {e}") from None
    return Prepared(req, ids, params, compile_grammar(loaded, req, tools), tools.fmt if tools else None)
