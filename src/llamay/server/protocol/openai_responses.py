"""POST /v1/responses, text and function calls: body -> GenRequest, engine events -> a response object or
its event stream (ref: ../shared/docs/protocols/openai.md §5)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...events import Delta, Finish, Progress, TokenLogprob, ToolCallDelta, Usage
from .base import ProtocolError, ResponseMeta, bad_request
from .llamacpp_params import parse_telemetry
from .openai_common import (
    OPENAI_DEFAULTS,
    check_function,
    check_tool_choice,
    error_object,
    frame,
    get_bool,
    get_field,
    get_int,
    get_str,
    parse_max_tokens,
    parse_sampling,
    require_body,
    optional_model,
)
from .request import GenRequest, LlamaOptions, ResponsesOptions, Sampling, ToolOptions
from .timings import chunk_timings, progress_fields, timings_body

ROLES = {"developer": "system", "system": "system", "user": "user", "assistant": "assistant"}
TEXT_PARTS = {"input_text", "output_text"}  # output_text: assistant turns of the history
MEDIA_PARTS = {"input_image", "input_file", "input_audio"}
LOGPROBS_INCLUDE = "message.output_text.logprobs"
TOOL_CHOICES = ("none", "auto", "required")


def parse_responses(body: Any) -> GenRequest:
    body = require_body(body)
    model = optional_model(body)
    for name in ("previous_response_id", "conversation"):
        if body.get(name) is not None:
            raise bad_request(f"'{name}' is not supported: this server stores no responses, "
                              "send the whole conversation in 'input'", name)
    instructions = get_str(body, "instructions")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + parse_input(body)
    top = get_int(body, "top_logprobs", 0, 20)
    include = get_field(body, "include", (list,), "an array of strings") or []
    text = get_field(body, "text", (dict,), "an object") or {}
    fmt = get_field(text, "format", (dict,), "an object", "text.format")
    tools = _parse_tools(body)
    tool_options = ToolOptions(check_tool_choice(_tool_choice(body), tools),
                               get_bool(body, "parallel_tool_calls") is not False)
    return GenRequest(
        model=model, messages=messages, stream=bool(get_bool(body, "stream")),
        max_tokens=parse_max_tokens(body, "max_output_tokens"), sampling=Sampling(**parse_sampling(body)),
        sampling_defaults=OPENAI_DEFAULTS, logprobs=bool(top) or LOGPROBS_INCLUDE in include, top_logprobs=top or 0,
        tools=tools, tool_options=tool_options, format=None if fmt is None or fmt.get("type") == "text" else fmt,
        responses=ResponsesOptions(instructions, body.get("metadata")), llama=LlamaOptions(**parse_telemetry(body)))


def _parse_tools(body: dict) -> list[dict] | None:
    """Flat function tools {"type": "function", "name", "description"?, "parameters"?, "strict"?} -> the
    chat-template shape; built-in tools (web_search, file_search, ...) cannot run here: 400."""
    tools = get_field(body, "tools", (list,), "an array of tools")
    return [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)] if tools else None


def _tool(tool: Any, where: str) -> dict:
    if not isinstance(tool, dict):
        raise bad_request(f"'{where}' must be an object", where)
    if tool.get("type") != "function":
        raise bad_request(f"'{where}.type' is {tool.get('type')!r}: only function tools are served here",
                          f"{where}.type")
    check_function(tool, where)
    get_field(tool, "strict", (bool,), "a boolean", f"{where}.strict")
    return {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters",
                                                                        "strict") if tool.get(key) is not None}}


def _tool_choice(body: dict) -> str | dict:
    """"none" | "auto" (the default) | "required" | {"type": "function", "name"} -> {"name"}."""
    choice = get_field(body, "tool_choice", (str, dict), "a string or an object")
    if choice is None:
        return "auto"
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"name": choice["name"]}
    raise bad_request("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}, "
                      f"got {choice!r}", "tool_choice")


def _echo_tools(tools: list[dict] | None) -> list[dict]:
    """req.tools back in the flat Responses shape (the response object echoes them)."""
    return [{"type": "function", **t["function"]} for t in tools or []]


def _echo_tool_choice(choice: str | dict) -> str | dict:
    return {"type": "function", "name": choice["name"]} if isinstance(choice, dict) else choice


def parse_input(body: dict) -> list[dict]:
    """`input`: a string (one user message) or a list of items: messages with text content, function_call
    items (joined to the assistant turn they follow), function_call_output items (tool messages) and
    reasoning items (accepted, not re-rendered)."""
    items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad_request("'input' is required: a string or a non-empty array of message items", "input")
    messages: list[dict] = []
    for i, item in enumerate(items):
        _add_item(messages, item, f"input[{i}]")
    return messages


def _add_item(messages: list[dict], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise bad_request(f"'{where}' must be an object", where)
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(_input_message(item, where))
    elif kind == "function_call":
        call = {"id": _required_str(item, "call_id", where), "type": "function",
                "function": {"name": _required_str(item, "name", where),
                             "arguments": _required_str(item, "arguments", where)}}
        if not messages or messages[-1]["role"] != "assistant":
            messages.append({"role": "assistant", "content": ""})
        messages[-1].setdefault("tool_calls", []).append(call)
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _parts_text(output, f"{where}.output")
        messages.append({"role": "tool", "content": text, "tool_call_id": _required_str(item, "call_id", where)})
    elif kind != "reasoning":
        raise bad_request(f"'{where}.type' is {kind!r}: only message, function_call, function_call_output "
                          "and reasoning items are supported", f"{where}.type")


def _required_str(item: dict, key: str, where: str) -> str:
    value = get_str(item, key, f"{where}.{key}")
    if value is None:
        raise bad_request(f"'{where}.{key}' is required", f"{where}.{key}")
    return value


def _input_message(item: dict, where: str) -> dict:
    role = item.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": ROLES[role], "content": content}
    return {"role": ROLES[role], "content": _parts_text(content, f"{where}.content")}


def _parts_text(content: Any, where: str) -> str:
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or an array of content parts", where)
    return "\n".join(_part_text(p, f"{where}[{j}]") for j, p in enumerate(content))


def _part_text(part: Any, where: str) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    kind = kind if isinstance(kind, str) else None
    if kind in MEDIA_PARTS:
        raise bad_request(f"'{where}' is an {kind} part: this server has no vision or file input, "
                          "only input_text parts are accepted", f"{where}.type")
    if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
        raise bad_request(f"'{where}' must be an input_text part with a string 'text'", where)
    return part["text"]


def responses_logprob(t: TokenLogprob) -> dict:
    """output_text's logprob shape (bytes required there; the delta events' shape allows it)."""
    return {"token": t.token, "logprob": t.logprob, "bytes": t.bytes,
            "top_logprobs": [{"token": x.token, "logprob": x.logprob, "bytes": x.bytes} for x in t.top]}


def responses_usage(usage: Usage) -> dict:
    """Required by the SDK's ResponseUsage: cache_write_tokens (we do no explicit cache writes) and
    reasoning_tokens (not counted apart from output tokens yet: 0)."""
    return {"input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}


@dataclass
class _Item:
    """One output item: a reasoning item (reasoning_text), an assistant message (output_text) or a
    function call (texts: its argument fragments)."""
    kind: str  # "reasoning" | "message" | "function_call"
    id: str
    texts: list[str] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)
    status: str = "in_progress"
    call_id: str = ""
    name: str = ""

    def part(self, empty: bool = False) -> dict:
        text = "" if empty else "".join(self.texts)
        if self.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": [] if empty else self.logprobs}

    def render(self, empty: bool = False) -> dict:
        if self.kind == "function_call":
            return {"id": self.id, "type": "function_call", "call_id": self.call_id, "name": self.name,
                    "arguments": "" if empty else "".join(self.texts), "status": self.status}
        content = [] if empty else [self.part()]
        if self.kind == "reasoning":
            return {"id": self.id, "type": "reasoning", "summary": [], "content": content, "status": self.status}
        return {"id": self.id, "type": "message", "role": "assistant", "status": self.status, "content": content}


class ResponsesOutput:
    """Engine events (one choice) -> the response body, or the event stream the SDK's ResponseStreamState
    accepts: created, in_progress, then per output item added / content_part.added / deltas / text done /
    content_part.done / item done, and completed (or incomplete) in end(). created and in_progress go out
    with the first fed event. Reasoning text opens a reasoning item; a switch between reasoning and
    content closes the open item and opens the next at the following output_index. A tool call is a
    function_call item of its own: added, function_call_arguments delta(s) and done, item done. As
    llama-server's: the completed (or incomplete) event has `timings`; a stream that asked has
    `prompt_progress` on an in_progress event per Progress event (the first is the one after created) and
    `timings` on every delta event."""

    def __init__(self, req: GenRequest, meta: ResponseMeta):
        self.req, self.meta = req, meta
        self._seq = 0
        self._started = False
        self._items: list[_Item] = []
        self._finish: Finish | None = None

    def feed(self, ev: Delta | Finish | Progress) -> list[str]:
        if isinstance(ev, Progress):
            return self._progress(progress_fields(self.req, ev)) if self.req.stream else []
        frames = self._start()
        if isinstance(ev, Finish):
            self._finish = ev
            if not any(item.kind in ("message", "function_call") for item in self._items):
                frames += self._append("message", "", [], {})
            frames += self._close("incomplete" if ev.reason == "length" else "completed")
        else:
            extra = chunk_timings(ev.usage)
            if ev.reasoning:
                frames += self._append("reasoning", ev.reasoning, [], extra)
            if ev.content or ev.logprobs:
                frames += self._append("message", ev.content, [responses_logprob(t) for t in ev.logprobs], extra)
            for part in ev.tool_calls:
                frames += self._call_part(part, extra)
        return frames if self.req.stream else []

    def end(self) -> list[str]:
        if not self.req.stream:
            return []
        response = self.body()
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return self._start() + [self._event(kind, response=response, timings=timings_body(self._finish.usage))]

    def body(self) -> dict:
        if self._finish is None:
            raise RuntimeError("body asked before the response finished")
        incomplete = self._finish.reason == "length"
        return self._response("incomplete" if incomplete else "completed", [i.render() for i in self._items],
                              usage=responses_usage(self._finish.usage),
                              incomplete_details={"reason": "max_output_tokens"} if incomplete else None)

    def fail(self, err: ProtocolError) -> list[str]:
        """Frames for an error after the stream began: an `error` event, then response.failed."""
        obj = error_object(err)
        code = "invalid_prompt" if err.kind in ("invalid_request", "context_length") else "server_error"
        done = [i.render() for i in self._items if i.status != "in_progress"]
        return self._start() + [
            self._event("error", code=obj["code"] or obj["type"], message=err.message, param=err.param),
            self._event("response.failed", response=self._response(
                "failed", done, error={"code": code, "message": err.message}))]

    def _start(self, extra: dict | None = None) -> list[str]:
        """created and in_progress (extra: fields of the latter), once."""
        if self._started:
            return []
        self._started = True
        return [self._event("response.created", response=self._response("in_progress", [])),
                self._event("response.in_progress", response=self._response("in_progress", []), **(extra or {}))]

    def _progress(self, extra: dict) -> list[str]:
        """A Progress event's frames: the first in_progress event carries it, later ones one more each."""
        return self._start(extra) or [self._event("response.in_progress", response=self._response("in_progress", []),
                                                  **extra)]

    def _append(self, kind: str, text: str, logprobs: list[dict], extra: dict) -> list[str]:
        frames = []
        item = self._items[-1] if self._items and self._items[-1].status == "in_progress" else None
        if item is None or item.kind != kind:
            frames += self._close("completed") + self._open(kind)
            item = self._items[-1]
        item.texts.append(text)
        item.logprobs.extend(logprobs)
        where = self._where(item)
        if kind == "reasoning":
            frames.append(self._event("response.reasoning_text.delta", **where, delta=text, **extra))
        else:
            frames.append(self._event("response.output_text.delta", **where, delta=text, logprobs=logprobs, **extra))
        return frames

    def _call_part(self, part: ToolCallDelta, extra: dict) -> list[str]:
        """A call's first part closes the open item and adds its function_call item; each non-empty
        argument fragment is one arguments delta."""
        frames = []
        if part.id is not None:
            frames += self._close("completed") + self._open("function_call", call_id=part.id, name=part.name)
        item = self._items[-1]
        if item.kind != "function_call" or item.status != "in_progress":
            raise ValueError(f"tool call {part.index}: arguments before the call's first delta")
        item.texts.append(part.arguments)
        if part.arguments:
            frames.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                                      output_index=self._items.index(item), delta=part.arguments, **extra))
        return frames

    def _open(self, kind: str, **fields) -> list[str]:
        prefix = {"reasoning": "rs", "message": "msg", "function_call": "fc"}[kind]
        item = _Item(kind, f"{prefix}_{self.meta.id.removeprefix('resp_')}_{len(self._items)}", **fields)
        self._items.append(item)
        where = self._where(item)
        added = self._event("response.output_item.added", output_index=where["output_index"],
                            item=item.render(empty=True))
        if kind == "function_call":
            return [added]
        return [added, self._event("response.content_part.added", **where, part=item.part(empty=True))]

    def _close(self, status: str) -> list[str]:
        if not self._items or self._items[-1].status != "in_progress":
            return []
        item = self._items[-1]
        item.status = status
        where, text = self._where(item), "".join(item.texts)
        if item.kind == "function_call":
            frames = [self._event("response.function_call_arguments.done", item_id=item.id,
                                  output_index=where["output_index"], arguments=text)]
        elif item.kind == "reasoning":
            frames = [self._event("response.reasoning_text.done", **where, text=text)]
        else:
            frames = [self._event("response.output_text.done", **where, text=text, logprobs=item.logprobs)]
        if item.kind != "function_call":
            frames.append(self._event("response.content_part.done", **where, part=item.part()))
        return frames + [self._event("response.output_item.done", output_index=where["output_index"],
                                     item=item.render())]

    def _where(self, item: _Item) -> dict:
        return {"item_id": item.id, "output_index": self._items.index(item), "content_index": 0}

    def _event(self, kind: str, **payload) -> str:
        self._seq += 1
        return frame({"type": kind, "sequence_number": self._seq - 1, **payload}, event=kind)

    def _response(self, status: str, output: list[dict], **extra) -> dict:
        """The response object; settings echoed from the request as the SDK's Response model wants."""
        req, echo, sampling = self.req, self.req.responses or ResponsesOptions(), self.req.run_sampling()
        response = {
            "id": self.meta.id, "object": "response", "created_at": self.meta.created, "status": status,
            "model": self.meta.model, "output": output, "error": None, "incomplete_details": None,
            "instructions": echo.instructions, "max_output_tokens": req.max_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p,
            "tools": _echo_tools(req.tools), "tool_choice": _echo_tool_choice(req.tool_options.choice),
            "parallel_tool_calls": req.tool_options.parallel,
            "text": {"format": req.format or {"type": "text"}}, "metadata": echo.metadata,
            "previous_response_id": None, "store": False, "usage": None}
        response.update(extra)
        return response
