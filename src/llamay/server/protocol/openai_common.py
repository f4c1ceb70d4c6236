"""Pieces shared by the OpenAI converters: typed field readers, sampling fields, SSE framing, usage and
error objects (ref: ../shared/docs/protocols/openai.md). JSON null counts as "not sent" everywhere."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...events import Delta, Finish, TokenLogprob, Usage
from .base import ProtocolError, bad_request, merge_usage
from .request import FRESH_SEED, Sampling
from .toolcalls import ToolCall, add_call_part

MAX_N = 8  # choices per request: each is a full sequence in the batch
MAX_STOP = 4  # OpenAI's documented limit on stop sequences
MAX_TOKEN_ID_DIGITS = 10  # token ids are uint32
NUMBER = (int, float)


def _type_error(name: str, what: str) -> ProtocolError:
    return bad_request(f"'{name}' must be {what}", name)


def get_field(body: dict, name: str, types: tuple, what: str, param: str | None = None) -> Any:
    """body[name] if it has one of `types` (bool never counts as a number), None when absent or null."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise _type_error(param or name, what)
    return value


def get_str(body: dict, name: str, param: str | None = None) -> str | None:
    return get_field(body, name, (str,), "a string", param)


def get_bool(body: dict, name: str) -> bool | None:
    return get_field(body, name, (bool,), "a boolean")


def get_int(body: dict, name: str, lo: int | None = None, hi: int | None = None) -> int | None:
    value = get_field(body, name, (int,), "an integer")
    _check_range(name, value, lo, hi)
    return value


def get_num(body: dict, name: str, lo: float | None = None, hi: float | None = None) -> float | None:
    value = get_field(body, name, NUMBER, "a number")
    _check_range(name, value, lo, hi)
    return None if value is None else float(value)


def _check_range(name: str, value, lo, hi) -> None:
    if value is None:
        return
    if lo is not None and value < lo or hi is not None and value > hi:
        if hi is None:
            raise bad_request(f"'{name}' must be >= {lo}, got {value}", name)
        raise bad_request(f"'{name}' must be between {lo} and {hi}, got {value}", name)


def require_body(body: Any) -> dict:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def optional_model(body: dict) -> str | None:
    """The model named, or None (absent, null or ""): the server's default model."""
    return get_str(body, "model") or None


# OpenAI's documented defaults (1.0 each); top_k and min_p are llama-server's extras, left to llama.cpp's
# defaults (top_k 40, min_p 0.05) as a local-server user expects, which keeps temperature 1.0 sane
OPENAI_DEFAULTS = Sampling(temperature=1.0, top_p=1.0)
TOP_K_OFF = -1  # vLLM's and SGLang's "no top-k" (gateways add it to every body): llamay's 0


def parse_sampling(body: dict) -> dict[str, Any]:
    """The Sampling fields the body sets (a negative seed: llama.cpp's -1, a fresh one)."""
    sampling: dict[str, Any] = {}
    for name, lo, hi in (("temperature", 0, 2), ("top_p", 0, 1), ("presence_penalty", -2, 2),
                         ("frequency_penalty", -2, 2), ("min_p", 0, 1), ("repeat_penalty", 0, None)):
        value = get_num(body, name, lo, hi)
        if value is not None:
            sampling[name] = value
    if sampling.get("repeat_penalty") == 0:  # it divides positive logits
        raise bad_request("'repeat_penalty' must be > 0", "repeat_penalty")
    top_k, seed = get_int(body, "top_k", TOP_K_OFF), get_int(body, "seed")
    if top_k is not None:
        sampling["top_k"] = max(top_k, 0)
    if seed is not None:
        sampling["seed"] = seed if seed >= 0 else FRESH_SEED
    bias = parse_logit_bias(body)
    if bias:
        sampling["logit_bias"] = bias
    return sampling


def parse_logit_bias(body: dict) -> dict[int, float] | None:
    """OpenAI's {"<token id>": bias} with bias in -100..100 -> {token id: bias}."""
    raw = get_field(body, "logit_bias", (dict,), "an object mapping token ids to biases")
    if raw is None:
        return None
    bias: dict[int, float] = {}
    for key, value in raw.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= MAX_TOKEN_ID_DIGITS):
            raise bad_request(f"'logit_bias' keys must be token ids as strings, got {key!r}", "logit_bias")
        if isinstance(value, bool) or not isinstance(value, NUMBER) or not -100 <= value <= 100:
            raise bad_request(f"'logit_bias' values must be numbers between -100 and 100, got {value!r}",
                              "logit_bias")
        bias[int(key)] = float(value)
    return bias


def parse_stop(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _type_error("stop", "a string or an array of strings")
    if len(stop) > MAX_STOP:
        raise bad_request(f"'stop' takes at most {MAX_STOP} sequences, got {len(stop)}", "stop")
    return [s for s in stop if s]  # an empty stop string would end every generation at once


def parse_n(body: dict) -> int:
    n = get_int(body, "n", 1)
    if n is not None and n > MAX_N:
        raise bad_request(f"'n' is at most {MAX_N} on this server, got {n}", "n")
    return 1 if n is None else n


def parse_stream(body: dict) -> tuple[bool, bool]:
    """(stream, include_usage); stream_options is only valid with stream, as OpenAI answers."""
    stream = bool(get_bool(body, "stream"))
    options = get_field(body, "stream_options", (dict,), "an object")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return stream, bool(get_field(options, "include_usage", (bool,), "a boolean", "stream_options.include_usage"))


def parse_max_tokens(body: dict, *names: str) -> int | None:
    """The first of `names` that is set (preferred field first); each must be >= 1 when given."""
    values = [(name, get_int(body, name, 1)) for name in names]
    return next((value for _, value in values if value is not None), None)


def check_function_tool(tool: Any, where: str) -> dict:
    """One tool in the chat shape {"type": "function", "function": {"name": str, "description"?: str,
    "parameters"?: object}}; anything else (custom tools included) is a 400 naming the path."""
    if not isinstance(tool, dict):
        raise bad_request(f"'{where}' must be an object", where)
    if tool.get("type") != "function":
        raise bad_request(f"'{where}.type' must be 'function' (the only tool type served here), "
                          f"got {tool.get('type')!r}", f"{where}.type")
    fn = get_field(tool, "function", (dict,), "an object", f"{where}.function")
    if fn is None:
        raise bad_request(f"'{where}.function' is required", f"{where}.function")
    check_function(fn, f"{where}.function")
    return tool


def check_function(fn: dict, where: str) -> None:
    """name a non-empty string; description a string and parameters a JSON Schema object when present."""
    if not get_str(fn, "name", f"{where}.name"):
        raise bad_request(f"'{where}.name' is required", f"{where}.name")
    get_str(fn, "description", f"{where}.description")
    get_field(fn, "parameters", (dict,), "a JSON Schema object", f"{where}.parameters")


def parse_function_tools(body: dict) -> list[dict] | None:
    """`tools` in the chat shape, each checked; None when absent or empty."""
    tools = get_field(body, "tools", (list,), "an array of tools")
    if not tools:
        return None
    return [check_function_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]


def check_tool_choice(choice: str | dict, tools: list[dict] | None) -> str | dict:
    """A normalised tool_choice ("none" | "auto" | "required" | {"name"}) against the offered tools:
    only none/auto without tools; a named function must be one of them."""
    names = [t["function"]["name"] for t in tools or []]
    if not names and choice not in ("none", "auto"):
        raise bad_request(f"'tool_choice' {choice!r} needs 'tools', and none were given", "tool_choice")
    if isinstance(choice, dict) and choice["name"] not in names:
        raise bad_request(f"'tool_choice' names function {choice['name']!r}, which is not among 'tools' "
                          f"({', '.join(names)})", "tool_choice")
    return choice


def frame(obj: dict, event: str | None = None) -> str:
    """One SSE event: compact JSON, non-ASCII kept."""
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n" if event else f"data: {data}\n\n"


DONE = "data: [DONE]\n\n"
FINISH_REASONS = {"stop": "stop", "length": "length"}


def usage_body(usage: Usage) -> dict:
    """Chat/completions usage; prefix-cache hits in prompt_tokens_details.cached_tokens, and by tier (memory,
    disk, shared) in llamay's own `llamay` object."""
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}, "llamay": cache_tiers(usage)}


def cache_tiers(usage: Usage) -> dict:
    """The prompt tokens not computed, by where they came from (llamay's usage extension)."""
    return {"cached_memory_tokens": usage.cached_tokens - usage.disk_tokens - usage.shared_tokens,
            "cached_disk_tokens": usage.disk_tokens, "cached_shared_tokens": usage.shared_tokens}


# ProtocolError.kind -> (OpenAI error type, code); codes as OpenAI sends them (openai.md §6); a prompt over
# the context has llama-server's type beside OpenAI's code (and llama-server's n_prompt_tokens, n_ctx).
ERROR_TYPES = {
    "invalid_request": ("invalid_request_error", None),
    "rate_limit": ("rate_limit_error", "rate_limit_exceeded"),
    "permission": ("invalid_request_error", "forbidden"),
    "not_found": ("invalid_request_error", "model_not_found"),
    "context_length": ("exceed_context_size_error", "context_length_exceeded"),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "overloaded": ("server_error", None),
    "not_supported": ("not_supported_error", None),
    "internal": ("server_error", None),
}


def error_object(err: ProtocolError) -> dict:
    """The four keys OpenAI always sends: message, type, param, code (and the error's detail)."""
    kind, code = ERROR_TYPES.get(err.kind, ("server_error", None))
    if err.kind == "not_found" and err.param != "model":
        code = None  # something else not found (a context): not OpenAI's model_not_found
    return {"message": err.message, "type": kind, "param": err.param, "code": code, **err.detail}


@dataclass
class ChoiceState:
    """What one choice produced so far (for body() and the finish chunk)."""
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # completions' text_offset per logprobs entry
    calls: list[ToolCall] = field(default_factory=list)
    finish: Finish | None = None

    def add(self, delta: Delta) -> None:
        self.content.append(delta.content)
        self.reasoning.append(delta.reasoning)
        self.logprobs.extend(delta.logprobs)
        for part in delta.tool_calls:
            add_call_part(self.calls, part)


class ChoicesOutput:
    """The bookkeeping ChatOutput and CompletionOutput share: per-choice state, merged usage."""

    def __init__(self, req, meta):
        self.req, self.meta = req, meta
        self.choices = [ChoiceState() for _ in range(req.n)]

    def record(self, ev: Delta | Finish) -> ChoiceState:
        state = self.choices[ev.index]
        if isinstance(ev, Finish):
            state.finish = ev
        else:
            state.add(ev)
        return state

    def fail(self, err: ProtocolError) -> list[str]:
        """The frame for an error after the stream began: a data payload with a top-level `error`
        (the SDK raises APIError on it)."""
        return [frame({"error": error_object(err)})]

    def usage(self) -> Usage:
        finishes = [c.finish for c in self.choices]
        if any(f is None for f in finishes):
            raise RuntimeError("usage asked before every choice finished")
        return merge_usage(finishes)
