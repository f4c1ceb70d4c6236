"""Anthropic Messages API, response side: Delta/Finish events -> a Message body or its SSE event stream, the
count_tokens body and the error shapes (ref: shared/docs/protocols/anthropic.md; shapes checked against the
anthropic SDK 2.14)."""
from __future__ import annotations

import json
from typing import Any

from ...events import Delta, Finish, ToolCallDelta, Usage
from .base import ProtocolError, ResponseMeta, merge_usage
from .request import GenRequest
from .toolcalls import arguments_object

_ERROR_TYPES = {"invalid_request": "invalid_request_error", "context_length": "invalid_request_error",
                "rate_limit": "rate_limit_error", "permission": "permission_error",
                "not_found": "not_found_error", "overloaded": "overloaded_error",
                "authentication": "authentication_error", "internal": "api_error", "timeout": "timeout_error"}
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def count_tokens_body(n_tokens: int) -> dict:
    return {"input_tokens": n_tokens}


class MessagesOutput:
    """Delta/Finish events of one choice (n is 1) -> a Message body, or its event stream:
    message_start, then per block content_block_start (ping after the first), deltas, content_block_stop,
    then message_delta (stop reason, cumulative usage) and, from end(), message_stop.

    Blocks are indexed 0, 1, ... in start order: a "thinking" block while reasoning arrives, a "text" block
    for content, a "tool_use" block per tool call (its input streamed as input_json_delta fragments); a text
    block (empty) is added when neither text nor a tool call came. prompt_usage, when the route knows it
    before generating, puts the final input token counts in message_start already."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, prompt_usage: Usage | None = None):
        self.req, self.meta, self.prompt_usage = req, meta, prompt_usage
        self._blocks: list[list] = []  # [kind, text, tool_use {id, name} or None] in start order; index = position
        self._open = False  # the last block is started and not yet stopped
        self._started = False
        self._finish: Finish | None = None

    def feed(self, ev: Delta | Finish) -> list[str]:
        if ev.index != 0:
            raise ValueError(f"Anthropic messages have one choice; got index {ev.index}")
        if isinstance(ev, Finish):
            frames = self._on_finish(ev)
        else:
            frames = self._start(self.prompt_usage or Usage(), 1)  # one token already sampled
            frames += self._append("thinking", ev.reasoning) + self._append("text", ev.content)
            for part in ev.tool_calls:
                frames += self._tool_part(part)
        return frames if self.req.stream else []

    def end(self) -> list[str]:
        self._usage()  # asserts the Finish came
        return [_sse("message_stop", {"type": "message_stop"})] if self.req.stream else []

    def fail(self, err: ProtocolError) -> list[str]:
        return [stream_error(err)]

    def body(self) -> dict:
        stop_reason, stop_sequence = self._stop()
        content = [_block(kind, text, tool) for kind, text, tool in self._blocks]
        return {"id": self.meta.id, "type": "message", "role": "assistant", "model": self.meta.model,
                "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": _usage_json(self._usage())}

    def _start(self, usage: Usage, output_tokens: int) -> list[str]:
        if self._started:
            return []
        self._started = True
        message = {"id": self.meta.id, "type": "message", "role": "assistant", "model": self.meta.model,
                   "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": _usage_json(usage) | {"output_tokens": output_tokens}}
        return [_sse("message_start", {"type": "message_start", "message": message})]

    def _append(self, kind: str, text: str) -> list[str]:
        if not text:
            return []
        frames = [] if self._open and self._blocks[-1][0] == kind else self._open_block(kind)
        self._blocks[-1][1] += text
        delta = {"type": "text_delta", "text": text} if kind == "text" else \
            {"type": "thinking_delta", "thinking": text}
        return frames + [_sse("content_block_delta", {"type": "content_block_delta",
                                                      "index": len(self._blocks) - 1, "delta": delta})]

    def _tool_part(self, part: ToolCallDelta) -> list[str]:
        """A call's first part stops the open block and starts its tool_use block; every part's argument
        text is one input_json_delta (the first may be "", as the API sends it)."""
        frames = []
        if part.id is not None:
            frames += self._open_block("tool_use", {"id": "toolu_" + part.id.removeprefix("call_"), "name": part.name})
        if not (self._open and self._blocks[-1][0] == "tool_use"):
            raise ValueError(f"tool call {part.index}: arguments before the call's first delta")
        self._blocks[-1][1] += part.arguments
        delta = {"type": "input_json_delta", "partial_json": part.arguments}
        return frames + [_sse("content_block_delta", {"type": "content_block_delta",
                                                      "index": len(self._blocks) - 1, "delta": delta})]

    def _open_block(self, kind: str, tool: dict | None = None) -> list[str]:
        frames = self._close_block()
        self._blocks.append([kind, "", tool])
        self._open = True
        start = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": {"type": "tool_use", **(tool or {}), "input": {}}}[kind]
        frames.append(_sse("content_block_start", {"type": "content_block_start",
                                                   "index": len(self._blocks) - 1, "content_block": start}))
        return frames + ([_sse("ping", {"type": "ping"})] if len(self._blocks) == 1 else [])

    def _close_block(self) -> list[str]:
        if not self._open:
            return []
        self._open = False
        return [_sse("content_block_stop", {"type": "content_block_stop", "index": len(self._blocks) - 1})]

    def _on_finish(self, fin: Finish) -> list[str]:
        self._finish = fin
        frames = self._start(fin.usage, fin.usage.completion_tokens)
        if not any(kind in ("text", "tool_use") for kind, _, _ in self._blocks):
            frames += self._open_block("text")
        frames += self._close_block()
        stop_reason, stop_sequence = self._stop()
        return frames + [_sse("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": _usage_json(self._usage())})]

    def _stop(self) -> tuple[str, str | None]:
        """Finish.reason -> (stop_reason, stop_sequence)."""
        self._usage()
        reason = self._finish.reason
        if reason == "stop" and self._finish.stop_sequence is not None:
            return "stop_sequence", self._finish.stop_sequence
        if reason not in _STOP_REASONS:
            raise ValueError(f"unknown finish reason {reason!r}")
        return _STOP_REASONS[reason], None

    def _usage(self) -> Usage:
        if self._finish is None:
            raise RuntimeError("the response is not finished: feed the Finish event first")
        return merge_usage([self._finish])


def _block(kind: str, text: str, tool: dict | None) -> dict:
    if kind == "text":
        return {"type": "text", "text": text, "citations": None}
    if kind == "tool_use":
        return {"type": "tool_use", **tool, "input": arguments_object(text, tool["name"])}
    return {"type": "thinking", "thinking": text, "signature": ""}


def _usage_json(usage: Usage) -> dict:
    """input_tokens is the uncached part of the prompt; the prefix-cache hit is cache_read_input_tokens."""
    return {"input_tokens": usage.prompt_tokens - usage.cached_tokens, "output_tokens": usage.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": usage.cached_tokens}


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


# ---- errors -------------------------------------------------------------------------------------------------

def error_status(err: ProtocolError) -> int:
    """The HTTP status to send: the API signals overload with 529 (the SDK's OverloadedError), else err.status."""
    return 529 if err.kind == "overloaded" else err.status


def error_body(err: ProtocolError, request_id: str | None = None) -> dict:
    fallback = "api_error" if err.status >= 500 else "invalid_request_error"
    body: dict[str, Any] = {"type": "error",
                            "error": {"type": _ERROR_TYPES.get(err.kind, fallback), "message": err.message}}
    if request_id:
        body["request_id"] = request_id
    return body


def stream_error(err: ProtocolError, request_id: str | None = None) -> str:
    """The frame for an error after the stream began (the HTTP status stays 200; the SDK raises on it)."""
    return _sse("error", error_body(err, request_id))
