"""An upstream's answer, whole or streamed, in its own API -> the Delta / Finish events the local engine
produces (llamay/events.py), so every client API's writer serves it unchanged (pure: no I/O).

Each reader takes a whole body (whole()) or a stream's items one by one (item()), then end() when the stream
ended; it raises ProtocolError 502 for an error the upstream reports inside a stream, or a stream cut short.
`prompt` is the prompt's usage once the upstream told it (an Anthropic stream does so before any text)."""
from __future__ import annotations

import json

from ...events import Delta, Finish, TokenLogprob, ToolCallDelta, TopLogprob, Usage
from ...toolcall.parser import new_call_id
from ..protocol.base import ProtocolError

_OPENAI_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls"}
_ANTHROPIC_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                      "model_context_window_exceeded": "length"}


def stream_error(upstream: str, error) -> ProtocolError:
    """An error the upstream sent inside its stream (any API's shape) -> 502 naming the upstream."""
    message = error.get("message") if isinstance(error, dict) else error
    return ProtocolError(502, f"upstream '{upstream}' failed during generation: {message}", "upstream")


class _Calls:
    """Tool calls of one choice as the upstream numbers them -> ToolCallDelta parts numbered 0, 1, ...: a
    call's first part carries its id (made when the upstream gave none) and name."""

    def __init__(self):
        self.ours: dict[object, int] = {}

    def part(self, key, call_id: str | None, name: str | None, arguments: str) -> ToolCallDelta:
        if key in self.ours:
            return ToolCallDelta(self.ours[key], arguments=arguments)
        self.ours[key] = len(self.ours)
        return ToolCallDelta(self.ours[key], call_id or new_call_id(), name or "", arguments)


def _reason(reason: str, table: dict[str, str], calls: _Calls) -> str:
    ours = table.get(reason, "stop")
    return "tool_calls" if ours == "stop" and calls.ours else ours


class OpenAIReader:
    """Chat completions (chat) or completions: chunks with choices[].delta / choices[].text, finish_reason,
    then a usage chunk (the request asks stream_options.include_usage) and [DONE]. Finish events wait for
    the end: the usage comes after the last finish_reason."""

    def __init__(self, upstream: str, n: int, chat: bool):
        self.upstream, self.n, self.chat = upstream, n, chat
        self.reasons: dict[int, str] = {}
        self.calls = [_Calls() for _ in range(n)]
        self.usage = Usage()
        self.prompt: Usage | None = None

    def whole(self, body: dict) -> list:
        choices = []
        for c in body.get("choices") or []:
            message = c.get("message") or {}
            calls = [{**call, "index": j} for j, call in enumerate(message.get("tool_calls") or [])]
            choices.append({**c, "delta": {**message, "tool_calls": calls}})
        return self.item({"choices": choices, "usage": body.get("usage")}) + self.end()

    def item(self, data: dict) -> list:
        if data.get("error") is not None:
            raise stream_error(self.upstream, data["error"])
        if data.get("usage"):
            self._usage(data["usage"])
        out = []
        for choice in data.get("choices") or []:
            i = choice.get("index") or 0
            if not 0 <= i < self.n:
                raise stream_error(self.upstream, f"a choice index {i} of {self.n}")
            delta = self._delta(i, choice)
            if delta.content or delta.reasoning or delta.tool_calls or delta.logprobs:
                out.append(delta)
            if choice.get("finish_reason"):
                self.reasons[i] = _reason(choice["finish_reason"], _OPENAI_REASONS, self.calls[i])
        return out

    def end(self) -> list:
        if len(self.reasons) < self.n:
            raise stream_error(self.upstream, "the answer ended before its finish_reason")
        u = self.usage
        return [Finish(i, self.reasons[i], Usage(u.prompt_tokens, u.cached_tokens, u.completion_tokens if i == 0 else 0))
                for i in range(self.n)]  # the upstream counts the choices together: the first carries them

    def _delta(self, i: int, choice: dict) -> Delta:
        if not self.chat:
            return Delta(i, choice.get("text") or "")
        d = choice.get("delta") or {}
        calls = [self.calls[i].part(c.get("index", j), c.get("id"), (c.get("function") or {}).get("name"),
                                    (c.get("function") or {}).get("arguments") or "")
                 for j, c in enumerate(d.get("tool_calls") or [])]
        logprobs = [_logprob(x) for x in (choice.get("logprobs") or {}).get("content") or []]
        return Delta(i, d.get("content") or "", d.get("reasoning_content") or d.get("reasoning") or "", logprobs, calls)

    def _usage(self, usage: dict) -> None:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        self.usage = Usage(usage.get("prompt_tokens") or 0, cached, usage.get("completion_tokens") or 0)
        self.prompt = Usage(self.usage.prompt_tokens, cached)


def _logprob(x: dict) -> TokenLogprob:
    def raw(entry: dict) -> list[int]:
        return entry.get("bytes") or list(entry.get("token", "").encode())

    top = [TopLogprob(t.get("token", ""), t.get("logprob", 0.0), raw(t)) for t in x.get("top_logprobs") or []]
    return TokenLogprob(x.get("token", ""), x.get("logprob", 0.0), raw(x), top)


class AnthropicReader:
    """Messages: message_start (the prompt's usage), content_block_start / _delta / _stop per text,
    thinking or tool_use block, message_delta (stop reason, output tokens), message_stop."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.calls = _Calls()
        self.usage = Usage()
        self.prompt: Usage | None = None
        self.stop: tuple[str, str | None] | None = None
        self.done = False
        self._whole = False  # a whole body's tool_use blocks carry their input (a stream's start with {})

    def whole(self, body: dict) -> list:
        self._whole = True
        out = self.item({"type": "message_start", "message": body})
        for j, block in enumerate(body.get("content") or []):
            out += self.item({"type": "content_block_start", "index": j, "content_block": block})
        out += self.item({"type": "message_delta", "delta": body, "usage": body.get("usage") or {}})
        return out + self.item({"type": "message_stop"}) + self.end()

    def item(self, data: dict) -> list:
        kind = data.get("type")
        if kind == "error":
            raise stream_error(self.upstream, data.get("error"))
        if kind == "message_start":
            self._usage((data.get("message") or {}).get("usage") or {})
            self.prompt = Usage(self.usage.prompt_tokens, self.usage.cached_tokens)
        elif kind == "content_block_start":
            return self._block(data.get("index"), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(data.get("index"), data.get("delta") or {})
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self.stop = (delta.get("stop_reason") or "end_turn", delta.get("stop_sequence"))
            self._usage(data.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        return []

    def end(self) -> list:
        if not self.done or self.stop is None:
            raise stream_error(self.upstream, "the stream ended before message_stop")
        reason = _reason(self.stop[0], _ANTHROPIC_REASONS, self.calls)
        return [Finish(0, reason, self.usage, stop_sequence=self.stop[1] if reason == "stop" else None)]

    def _block(self, index, block: dict) -> list:
        kind = block.get("type")
        if kind == "tool_use":
            call_id = "call_" + str(block.get("id") or new_call_id()).removeprefix("toolu_")
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False) if self._whole else ""
            return [Delta(0, tool_calls=[self.calls.part(index, call_id, block.get("name"), arguments)])]
        if kind == "text" and block.get("text"):
            return [Delta(0, block["text"])]
        if kind == "thinking" and block.get("thinking"):
            return [Delta(0, reasoning=block["thinking"])]
        return []  # empty starts, redacted thinking

    def _delta(self, index, delta: dict) -> list:
        kind = delta.get("type")
        if kind == "text_delta":
            return [Delta(0, delta.get("text") or "")]
        if kind == "thinking_delta":
            return [Delta(0, reasoning=delta.get("thinking") or "")]
        if kind == "input_json_delta" and index in self.calls.ours:
            return [Delta(0, tool_calls=[self.calls.part(index, None, None, delta.get("partial_json") or "")])]
        return []  # signature_delta

    def _usage(self, usage: dict) -> None:
        """input_tokens excludes the cached part (cache_read_input_tokens) and what was written to the cache."""
        u = self.usage
        if "input_tokens" in usage:
            read = usage.get("cache_read_input_tokens") or 0
            u.prompt_tokens = (usage.get("input_tokens") or 0) + read + (usage.get("cache_creation_input_tokens") or 0)
            u.cached_tokens = read
        u.completion_tokens = usage.get("output_tokens") or u.completion_tokens


class OllamaReader:
    """/api/chat (message.content, .thinking, .tool_calls whole) or /api/generate (response, thinking)
    lines; the last has done, done_reason, counts and durations (ns). A whole body is one such line."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.calls = _Calls()
        self.prompt: Usage | None = None
        self.done = False

    def whole(self, body: dict) -> list:
        return self.item(body) + self.end()

    def item(self, data: dict) -> list:
        if data.get("error") is not None:
            raise stream_error(self.upstream, data["error"])
        message = data.get("message") or {}
        content = message.get("content") or data.get("response") or ""
        reasoning = message.get("thinking") or data.get("thinking") or ""
        calls = [self.calls.part(len(self.calls.ours), c.get("id"), (c.get("function") or {}).get("name"),
                                 json.dumps((c.get("function") or {}).get("arguments") or {}, ensure_ascii=False))
                 for c in message.get("tool_calls") or []]
        out = [Delta(0, content, reasoning, tool_calls=calls)] if content or reasoning or calls else []
        if data.get("done"):
            self.done = True
            usage = Usage(data.get("prompt_eval_count") or 0, 0, data.get("eval_count") or 0,
                          data.get("load_duration") or 0, data.get("prompt_eval_duration") or 0,
                          data.get("eval_duration") or 0, data.get("total_duration") or 0)
            self.prompt = Usage(usage.prompt_tokens)
            reason = _reason(data.get("done_reason") or "stop", {"length": "length"}, self.calls)
            out.append(Finish(0, reason, usage, data.get("context") or None))
        return out

    def end(self) -> list:
        if not self.done:
            raise stream_error(self.upstream, "the stream ended before its done line")
        return []


def reader_for(api: str, upstream: str, n: int, chat: bool):
    if api == "openai":
        return OpenAIReader(upstream, n, chat)
    return AnthropicReader(upstream) if api == "anthropic" else OllamaReader(upstream)
