"""Ollama's native API, response side: NDJSON lines and whole bodies for /api/generate and /api/chat,
the listing bodies (/api/tags, /api/show, /api/ps, /api/version) and the error shapes.

Wire reference: shared/docs/protocols/ollama.md §3, §4, §6 (zero metrics omitted, durations in ns,
timestamps RFC 3339 with nanoseconds)."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ...events import Delta, Finish, TokenLogprob, Usage
from .base import ModelInfo, ProtocolError, ResponseMeta
from .request import GenRequest
from .toolcalls import ToolCall, add_call_part

_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop"}  # Ollama keeps "stop" for tool calls
_FOREVER_NS = (1 << 63) - 1  # Go's time.Now().Add(math.MaxInt64): how Ollama dates a never-expiring model
_ARRAY_LIMIT = 5  # /api/show empties model_info arrays longer than this unless verbose


def rfc3339_nano(unix_ns: int) -> str:
    """UTC time as Go's time.RFC3339Nano writes it: fraction trailing zeros trimmed, none when whole."""
    seconds, frac = divmod(int(unix_ns), 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _metrics(usage: Usage) -> dict[str, int]:
    """The six metric fields; Go's omitempty drops the zero ones."""
    pairs = (("total_duration", usage.total_ns), ("load_duration", usage.load_ns),
             ("prompt_eval_count", usage.prompt_eval_count), ("prompt_eval_duration", usage.prompt_eval_ns),
             ("eval_count", usage.completion_tokens), ("eval_duration", usage.eval_ns))
    return {key: int(value) for key, value in pairs if value}


def _logprob(lp: TokenLogprob, n_top: int) -> dict:
    """Ollama's api.Logprob: {token, logprob, bytes?, top_logprobs?: [{token, logprob, bytes?}]}."""
    obj: dict[str, Any] = {"token": lp.token, "logprob": lp.logprob}
    if lp.bytes:
        obj["bytes"] = list(lp.bytes)
    if n_top > 0 and lp.top:
        obj["top_logprobs"] = [{"token": t.token, "logprob": t.logprob, **({"bytes": list(t.bytes)} if t.bytes else {})}
                               for t in lp.top[:n_top]]
    return obj


class _NdjsonOutput:
    """One /api/generate or /api/chat response. Ollama has no `n`: every event belongs to the one choice.

    Streaming: a `done:false` line per non-empty Delta, then the `done:true` line with done_reason and the
    metrics when the Finish is fed; end() adds nothing (no [DONE] in NDJSON). Not streaming: body() is the
    final object with the whole text (and thinking, logprobs) concatenated. created_at is the clock's time
    when each line is made (clock: unix nanoseconds, injectable for tests)."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, clock: Callable[[], int] = time.time_ns):
        self.req, self.meta, self.clock = req, meta, clock
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.logprobs: list[dict] = []
        self.finish: Finish | None = None

    def feed(self, ev: Delta | Finish) -> list[str]:
        if isinstance(ev, Finish):
            self.finish = ev
            return [_line(self._object("", "", [], ev))] if self.req.stream else []
        self.content.append(ev.content)
        self.thinking.append(ev.reasoning)
        lps = [_logprob(lp, self.req.top_logprobs) for lp in ev.logprobs] if self.req.logprobs else []
        self.logprobs.extend(lps)
        if not self.req.stream or not (ev.content or ev.reasoning or lps):
            return []
        return [_line(self._object(ev.content, ev.reasoning, lps, None))]

    def end(self) -> list[str]:
        return []

    def fail(self, err: ProtocolError) -> list[str]:
        return [stream_error(err)]

    def body(self) -> dict:
        assert self.finish is not None, "body() before the Finish"
        return self._object("".join(self.content), "".join(self.thinking), self.logprobs, self.finish)

    def load_body(self) -> dict:
        """The reply to a load / unload request (OllamaOptions.load): one object, done."""
        reason = "unload" if self.req.ollama.load == "unload" else "load"
        return {**self._head(), **self._payload("", ""), "done": True, "done_reason": reason}

    def _head(self) -> dict:
        return {"model": self.meta.model, "created_at": rfc3339_nano(self.clock())}

    def _object(self, content: str, thinking: str, logprobs: list[dict], finish: Finish | None) -> dict:
        obj = {**self._head(), **self._payload(content, thinking), "done": finish is not None}
        if finish is not None:
            obj["done_reason"] = _DONE_REASONS.get(finish.reason, finish.reason)
            obj.update(self._final_extra(finish))
            obj.update(_metrics(finish.usage))
        if logprobs:
            obj["logprobs"] = logprobs
        return obj

    def _payload(self, content: str, thinking: str) -> dict:
        raise NotImplementedError

    def _final_extra(self, finish: Finish) -> dict:
        return {}


class OllamaGenerateOutput(_NdjsonOutput):
    """/api/generate: text in `response`, reasoning in `thinking`; the final object carries `context`
    (Finish.context) unless raw."""

    def _payload(self, content: str, thinking: str) -> dict:
        return {"response": content, **({"thinking": thinking} if thinking else {})}

    def _final_extra(self, finish: Finish) -> dict:
        return {"context": list(finish.context)} if finish.context and not self.req.raw else {}


class OllamaChatOutput(_NdjsonOutput):
    """/api/chat: text in `message.content`, reasoning in `message.thinking`, tool calls whole in
    `message.tool_calls` with arguments as an object. Streaming, a call goes out as its own done:false
    line once complete: when the next call starts, or at the Finish before the final line."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, clock: Callable[[], int] = time.time_ns):
        super().__init__(req, meta, clock)
        self.calls: list[ToolCall] = []
        self._n_sent = 0  # calls already streamed

    def feed(self, ev: Delta | Finish) -> list[str]:
        if isinstance(ev, Finish):
            return self._call_lines(len(self.calls)) + super().feed(ev)
        lines = super().feed(ev)
        for part in ev.tool_calls:
            add_call_part(self.calls, part)
        return lines + self._call_lines(len(self.calls) - 1)  # the last call may still grow

    def body(self) -> dict:
        obj = super().body()
        if self.calls:
            obj["message"]["tool_calls"] = [_tool_call(c, k) for k, c in enumerate(self.calls)]
        return obj

    def _call_lines(self, n_complete: int) -> list[str]:
        """Lines for the calls completed since the last ones sent (streaming only)."""
        first, self._n_sent = self._n_sent, max(self._n_sent, n_complete)
        if not self.req.stream:
            return []
        return [_line({**self._head(), "message": {"role": "assistant", "content": "",
                                                   "tool_calls": [_tool_call(self.calls[k], k)]}, "done": False})
                for k in range(first, self._n_sent)]

    def _payload(self, content: str, thinking: str) -> dict:
        message = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        return {"message": message}


def _tool_call(call: ToolCall, k: int) -> dict:
    """Ollama's api.ToolCall: arguments as an object."""
    return {"id": call.id, "function": {"index": k, "name": call.name, "arguments": call.arguments_object()}}

# ------------------------------------------------------------------------------------------------ errors


def error_body(err: ProtocolError) -> dict:
    """The body for err.status: Ollama's errors are always {"error": message}."""
    return {"error": err.message}


def stream_error(err: ProtocolError) -> str:
    """After streaming began (status stays 200): one last NDJSON line; the client raises on it."""
    return _line(error_body(err))

# ------------------------------------------------------------------------------------------------ listing


def _stamp(unix_seconds: float) -> str:
    return rfc3339_nano(round(unix_seconds * 1e9))


def _details(info: ModelInfo) -> dict:
    return {"parent_model": "", "format": "gguf", "family": info.architecture,
            "families": [info.architecture], "parameter_size": info.parameter_size,
            "quantization_level": info.quantization_level}


def tags_body(models: list[ModelInfo]) -> dict:
    """GET /api/tags: every model, `models` always an array."""
    return {"models": [{"name": m.name, "model": m.name, "modified_at": _stamp(m.modified_at), "size": m.size,
                        "digest": m.digest, "details": _details(m)} for m in models]}


def ps_body(models: list[ModelInfo], clock: Callable[[], int] = time.time_ns) -> dict:
    """GET /api/ps: the loaded models, latest expiry first (expires_at None: never, dated like Go's
    now + MaxInt64 ns, which Ollama's CLI shows as "Forever")."""
    now = clock()

    def expiry_ns(m: ModelInfo) -> int:
        return now + _FOREVER_NS if m.expires_at is None else round(m.expires_at * 1e9)

    loaded = sorted((m for m in models if m.loaded), key=expiry_ns, reverse=True)
    return {"models": [{"name": m.name, "model": m.name, "size": m.size, "digest": m.digest,
                        "details": _details(m), "expires_at": rfc3339_nano(expiry_ns(m)),
                        "size_vram": m.size_vram, "context_length": m.context_length} for m in loaded]}


def version_body(version: str) -> dict:
    return {"version": version}


def capabilities(info: ModelInfo) -> list[str]:
    """Ollama's capability names this model supports: "embedding" for a pooling model, else "completion",
    plus "tools" / "thinking" when the chat template handles them and "insert" with FIM tokens."""
    if f"{info.architecture}.pooling_type" in info.metadata:
        return ["embedding"]
    caps = ["completion"]
    if "tools" in info.template:
        caps.append("tools")
    if "tokenizer.ggml.fim_pre_token_id" in info.metadata and "tokenizer.ggml.fim_suf_token_id" in info.metadata:
        caps.append("insert")
    if any(mark in info.template for mark in ("<think>", "enable_thinking", "reasoning_content")):
        caps.append("thinking")
    return caps


def _info_value(value: Any, verbose: bool) -> Any:
    """A GGUF value as JSON (numpy arrays / scalars -> Python); arrays over 5 emptied unless verbose."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value] if verbose or len(value) <= _ARRAY_LIMIT else []
    return _finite(value)


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: a file's non-finite float is shown as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _modelfile(info: ModelInfo, parameters: str) -> str:
    lines = ['# Modelfile generated by "ollama show"', "# To build a new Modelfile based on this, replace FROM with:",
             f"# FROM {info.name}", "", f"FROM {info.path}"]
    if info.template:
        lines.append(f'TEMPLATE """{info.template}"""')
    lines += [f"PARAMETER {line}" for line in parameters.splitlines()]
    return "\n".join(lines) + "\n"


def show_body(info: ModelInfo, verbose: bool = False) -> dict:
    """POST /api/show. parameters: the context llamay runs the model with, Modelfile style."""
    parameters = f"num_ctx {info.context_length}"
    return {"modelfile": _modelfile(info, parameters), "parameters": parameters, "template": info.template,
            "details": _details(info),
            "model_info": {k: _info_value(v, verbose) for k, v in info.metadata.items()},
            "capabilities": capabilities(info), "modified_at": _stamp(info.modified_at)}
