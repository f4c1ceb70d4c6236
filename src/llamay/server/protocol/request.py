"""GenRequest, the API-neutral request every converter parses a body into (pure data, no I/O), and the typed
option groups it holds. Each converter fills them once; nothing downstream reads a body's keys."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FRESH_SEED = -1  # Sampling.seed asking for a fresh seed (SamplingParams' None)


@dataclass(frozen=True)
class Sampling:
    """engine SamplingParams fields as one layer gives them (the request, its API's documented defaults,
    `serve`'s flags, a stored model's params); None: not given here, the layer below decides (in the end
    SamplingParams' default, llama.cpp's). seed FRESH_SEED: a fresh one."""
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_last_n: int | None = None
    seed: int | None = None
    logit_bias: Mapping[int, float] | None = None  # {token id: bias}; -inf bans

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Sampling:
        """The Sampling fields among values (serve's settings, a stored model's params: other keys ignored)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if values.get(f.name) is not None})

    def over(self, below: Sampling) -> Sampling:
        """This layer's fields, below's where this one gives none."""
        return Sampling(**{f.name: getattr(below, f.name) if getattr(self, f.name) is None else getattr(self, f.name)
                           for f in dataclasses.fields(self)})

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class ToolOptions:
    """How the request's tools may be called."""
    choice: str | dict = "auto"  # "auto" | "none" | "required" | {"name": function}
    parallel: bool = True  # several calls in one answer


@dataclass(frozen=True)
class ChatOptions:
    """Rendering the chat template and reading its output."""
    template: str | None = None  # serve --chat-template (None: the model's)
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # chat_template_kwargs, passed to the render
    reasoning_format: str | None = None  # chat/reasoning.py's modes; None: the server's
    reasoning_effort: str | None = None  # OpenAI's; accepted, not run
    thinking: Mapping[str, Any] | None = None  # Anthropic's `thinking`; accepted, not run
    continue_final: bool = False  # prefill: the reply continues the last (assistant) message's text


@dataclass(frozen=True)
class LlamaOptions:
    """llama-server's fields beyond OpenAI's (its native routes and its OpenAI routes)."""
    id_slot: int | None = None  # the slot to serve it (server/slots.py); None: the best idle one
    ignore_eos: bool = False  # every end-of-generation token banned
    logit_bias: tuple[tuple[int | str, float], ...] = ()  # (token id or text, bias); a text biases each of its tokens
    lora: tuple[tuple[int, float], ...] | None = None  # (adapter id, scale); None: the model name's choice
    spec: str | None = None  # speculative decoding (engine/draft.py MODES); None: the server's
    grammar: str | None = None  # GBNF constraining the output
    return_tokens: bool = False  # /completion results carry their token ids
    response_fields: tuple[str, ...] = ()  # /completion results keep only these
    verbose: bool | None = None  # chat results carry `__verbose` (the raw result, its prompt); None: serve -v's
    timings_per_token: bool = False  # every streamed chunk carries `timings` (so far), not only the last
    return_progress: bool = False  # a stream carries `prompt_progress` chunks while the prompt is computed
    post_sampling_probs: bool = False  # logprobs are of the distribution drawn from, shown as probabilities


@dataclass(frozen=True)
class OllamaOptions:
    """Ollama's fields beyond the common ones. A request that has them gets a stored model's params for
    what it did not set."""
    num_predict: int | None = None  # as sent (None: not sent; a model's num_predict applies)
    think: bool | str | None = None  # accepted, not run
    truncate: bool | None = None  # accepted, not run
    shift: bool | None = None  # accepted, not run
    load: str | None = None  # "load" / "unload": an empty request that only loads or unloads the model


@dataclass(frozen=True)
class ResponsesOptions:
    """OpenAI Responses fields echoed in the response object."""
    instructions: str | None = None
    metadata: Any = None


@dataclass
class GenRequest:
    """What a client asked for, in API-neutral terms.

    Exactly one of messages / prompt is set. messages are normalised to the chat-template shape:
    {"role": "system"|"user"|"assistant"|"tool", "content": str} (plus "tool_calls", "tool_call_id",
    "name" where given). prompt is text (or token ids, or llama-server's mix of both: each text piece
    tokenized in place) used as is when raw, else wrapped as one user message by the model's template
    (Ollama /api/generate without raw)."""
    model: str | None  # None: the server's default model
    messages: list[dict] | None = None
    prompt: str | list[int | str] | None = None
    raw: bool = False
    system: str | None = None  # Ollama's `system` override; Anthropic's top-level system goes into messages
    template: str | None = None  # Ollama's `template` override (a Go template: only the plain forms are honoured)
    suffix: str | None = None
    max_tokens: int | None = None  # None: until end of generation or the context's end
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    n: int = 1
    sampling: Sampling = Sampling()  # what the request set itself
    # below it: the API's documented defaults; with_server_defaults and with_model_defaults put serve's
    # flags and a stored model's params between the two
    sampling_defaults: Sampling = Sampling()
    logprobs: bool = False
    top_logprobs: int = 0
    include_usage: bool = False  # OpenAI stream_options.include_usage
    echo: bool = False  # OpenAI completions: prompt text prepended to the output
    keep_alive: float | None = None  # seconds the model stays loaded after this request; None: default; <0: forever
    context: list[int] | None = None  # Ollama /api/generate `context` (token ids of an earlier exchange)
    format: Any = None  # structured output: OpenAI response_format, Ollama format, Anthropic output_config.format
    # Tool definitions in the chat-template (OpenAI chat) shape:
    # [{"type": "function", "function": {"name", "description"?, "parameters"?}}]
    tools: list[dict] | None = None
    tool_options: ToolOptions = ToolOptions()
    chat: ChatOptions = ChatOptions()
    llama: LlamaOptions = LlamaOptions()
    ollama: OllamaOptions | None = None  # None: not an Ollama request
    responses: ResponsesOptions | None = None  # None: not an OpenAI Responses request

    def run_sampling(self) -> Sampling:
        """The sampling it runs with: its own fields over its defaults."""
        return self.sampling.over(self.sampling_defaults)
