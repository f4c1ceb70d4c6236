"""The one internal request/response model every protocol converts to and from (pure data, no I/O).

A converter parses a request body into a GenRequest, and turns the engine's Delta/Finish events back into
its API's response (whole, or streamed). Errors are ProtocolError; each API renders them in its own shape."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ProtocolError(Exception):
    """A request the server answers with an error: status, message, and an API-neutral kind.

    kind: 'invalid_request' (400), 'not_found' (404: unknown model or context), 'context_length' (400: prompt
    over the context), 'overloaded' (503), 'authentication' (401), 'internal' (500)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def bad_request(message: str, param: str | None = None) -> ProtocolError:
    return ProtocolError(400, message, "invalid_request", param)


@dataclass
class GenRequest:
    """What a client asked for, in API-neutral terms.

    Exactly one of messages / prompt is set. messages are normalised to the chat-template shape:
    {"role": "system"|"user"|"assistant"|"tool", "content": str} (plus "tool_calls", "tool_call_id",
    "name" where given). prompt is text (or token ids) used as is when raw, else wrapped as one user
    message by the model's template (Ollama /api/generate without raw)."""
    model: str
    messages: list[dict] | None = None
    prompt: str | list[int] | None = None
    raw: bool = False
    system: str | None = None  # Ollama's `system` override (generate/chat); Anthropic's top-level system goes into messages
    template: str | None = None  # Ollama's `template` override (a Go template: only the plain forms are honoured)
    suffix: str | None = None
    max_tokens: int | None = None  # None: until end of generation or the context's end
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    n: int = 1
    # llamay.engine.SamplingParams keyword arguments: temperature, top_k, top_p, min_p, repeat_penalty,
    # presence_penalty, frequency_penalty, repeat_last_n, seed, logit_bias ({int token id: float bias}).
    # The converter fills what the request did not set with its API's documented defaults; a field left
    # out takes SamplingParams' default (llama.cpp's).
    sampling: dict[str, Any] = field(default_factory=dict)
    logprobs: bool = False
    top_logprobs: int = 0
    include_usage: bool = False  # OpenAI stream_options.include_usage
    echo: bool = False  # OpenAI completions: prompt text prepended to the output
    keep_alive: float | None = None  # seconds the model stays loaded after this request; None: default; <0: forever
    context: list[int] | None = None  # Ollama /api/generate `context` (token ids of an earlier exchange)
    format: Any = None  # structured output: OpenAI response_format, Ollama format, Anthropic output_config.format
    # Tool definitions in the chat-template (OpenAI chat) shape:
    # [{"type": "function", "function": {"name", "description"?, "parameters"?}}]. options["tool_choice"]
    # is "auto" (the default), "none", "required" or {"name": function}; options["parallel_tool_calls"] a bool.
    tools: list[dict] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # anything else API-specific the route needs
    options_set: frozenset | None = None  # Ollama: the option keys the request set (a model's params fill the rest)


@dataclass
class TopLogprob:
    token: str  # the token's text (may be part of a UTF-8 character: then bytes tells it exactly)
    logprob: float
    bytes: list[int]


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob] = field(default_factory=list)


@dataclass
class ToolCallDelta:
    """Part of one tool call of a choice. A call's first delta carries its id and name; later ones only
    argument text. A call's `arguments` fragments joined are its arguments as JSON object text (cut short
    only when the choice ends at max_tokens: Finish.reason 'length')."""
    index: int  # the call's position among this choice's calls: 0, 1, ...
    id: str | None = None  # "call_" + 24 alphanumerics, on the first delta; an API may reshape the prefix
    name: str | None = None  # on the first delta
    arguments: str = ""


@dataclass
class Delta:
    """New output of one choice. content and reasoning are text safe to show now (never half a UTF-8
    character, never part of a stop string); either may be empty. logprobs: one entry per sampled token
    this delta covers, when the request asked for logprobs. tool_calls: parts of calls, in order."""
    index: int
    content: str = ""
    reasoning: str = ""
    logprobs: list[TokenLogprob] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


@dataclass
class Usage:
    prompt_tokens: int = 0  # tokens of the prompt
    cached_tokens: int = 0  # of those, found already computed (prefix cache): not evaluated
    completion_tokens: int = 0
    load_ns: int = 0  # model load time charged to this request
    prompt_eval_ns: int = 0
    eval_ns: int = 0
    total_ns: int = 0

    @property
    def prompt_eval_count(self) -> int:
        """What was actually evaluated (Ollama's prompt_eval_count): the last prompt token is always
        recomputed, so a full cache hit still counts 1."""
        return self.prompt_tokens - self.cached_tokens


@dataclass
class Finish:
    """One choice ended. reason: 'stop' (end-of-generation token or stop string), 'length' (max_tokens
    or the context's end), 'tool_calls' (the output ended with one or more tool calls)."""
    index: int
    reason: str
    usage: Usage  # the usage of this choice's sequence (prompt counted in every choice)
    context: list[int] | None = None  # every token of the sequence: prompt and generated (Ollama's `context`)
    stop_sequence: str | None = None  # the stop string that ended it (reason 'stop'), if one did


@dataclass
class ResponseMeta:
    """What the route fixes before the first event: the response id, creation time, echoed model name."""
    id: str
    created: int  # unix seconds
    model: str
    created_ns: int = 0  # unix nanoseconds (Ollama's created_at)


def merge_usage(finishes: list[Finish]) -> Usage:
    """One request's usage over its n choices: the prompt counted once, completions summed."""
    first = finishes[0].usage
    total = Usage(first.prompt_tokens, first.cached_tokens, 0, first.load_ns, first.prompt_eval_ns)
    for f in finishes:
        total.completion_tokens += f.usage.completion_tokens
        total.eval_ns = max(total.eval_ns, f.usage.eval_ns)
        total.total_ns = max(total.total_ns, f.usage.total_ns)
    return total


@dataclass
class ModelInfo:
    """A model as the listing routes describe it (/v1/models, /api/tags, /api/show, /api/ps)."""
    name: str  # what clients pass as `model`, e.g. "smollm2:135m" or a file name
    path: str
    size: int  # bytes of the GGUF file
    digest: str  # sha256 hex of the file
    modified_at: float  # unix seconds
    architecture: str  # general.architecture, e.g. "llama"
    parameter_size: str  # e.g. "135M"
    quantization_level: str  # e.g. "Q4_1"
    context_length: int  # the context the server runs it with
    metadata: dict[str, Any] = field(default_factory=dict)  # GGUF key/values, big arrays left out
    template: str = ""  # tokenizer.chat_template
    loaded: bool = False
    expires_at: float | None = None  # unix seconds when it unloads (loaded models); None: never
    size_vram: int = 0
