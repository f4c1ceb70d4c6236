"""POST /v1/chat/completions: request body -> GenRequest, engine events -> chat.completion(.chunk)
(ref: ../shared/docs/protocols/openai.md §1)."""
from __future__ import annotations

import dataclasses
from typing import Any

from ...chat.reasoning import MODES as REASONING_FORMATS
from ...events import Delta, Finish, Progress, TokenLogprob, ToolCallDelta
from .base import ResponseMeta, bad_request
from .llamacpp_out import probs_entry
from .llamacpp_params import parse_extras
from .openai_common import (
    DONE,
    FINISH_REASONS,
    OPENAI_DEFAULTS,
    ChoicesOutput,
    ChoiceState,
    check_tool_choice,
    frame,
    get_bool,
    get_field,
    get_int,
    get_str,
    parse_function_tools,
    parse_max_tokens,
    parse_n,
    parse_sampling,
    parse_stop,
    parse_stream,
    require_body,
    optional_model,
    usage_body,
)
from .request import ChatOptions, GenRequest, Sampling, ToolOptions
from .timings import BUILD_INFO, chunk_timings, progress_fields, timings_body

ROLES = {"developer": "system", "system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
MEDIA_PARTS = {"image_url", "input_audio", "file"}
RESPONSE_FORMATS = {"text", "json_object", "json_schema"}
TOOL_CHOICES = ("none", "auto", "required")
CHAT_FINISH_REASONS = {**FINISH_REASONS, "tool_calls": "tool_calls"}


def parse_chat(body: Any) -> GenRequest:
    body = require_body(body)
    model = optional_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", "messages")
    stream, include_usage = parse_stream(body)
    logprobs, top_logprobs = _parse_logprobs(body)
    tools = parse_function_tools(body)
    extra_sampling, llama = parse_extras(body)
    llama = dataclasses.replace(llama, grammar=get_str(body, "grammar") or None)  # llama-server's GBNF field
    parsed = [parse_message(i, m) for i, m in enumerate(messages)]
    chat = _chat_options(body, parsed)
    if chat.continue_final and isinstance(messages[-1].get("content"), list):
        # the text parts of the message the reply continues are joined by a blank line (llama.cpp's
        # common_chat_msg::render_content), those of every other message by a newline
        last = len(messages) - 1
        parsed[last]["content"] = message_text(messages[last]["content"], f"messages[{last}]", True, "\n\n")
    return GenRequest(
        model=model, messages=parsed, stream=stream,
        include_usage=include_usage, n=parse_n(body), stop=parse_stop(body),
        max_tokens=parse_max_tokens(body, "max_completion_tokens", "max_tokens"),
        sampling=Sampling(**{**parse_sampling(body), **extra_sampling}), sampling_defaults=OPENAI_DEFAULTS,
        logprobs=logprobs, top_logprobs=top_logprobs, tools=tools, format=parse_response_format(body),
        tool_options=ToolOptions(_tool_choice(body, tools), get_bool(body, "parallel_tool_calls") is not False),
        chat=chat, llama=llama)


def _tool_call(call: Any, where: str) -> dict:
    """An assistant turn's earlier call: {"function": {"name": str, "arguments": JSON text or object}}."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad_request(f"'{where}.function.name' is required", f"{where}.function.name")
    if not isinstance(fn.get("arguments", ""), (str, dict)):
        raise bad_request(f"'{where}.function.arguments' must be a JSON string", f"{where}.function.arguments")
    return call


def parse_message(i: int, msg: Any) -> dict:
    """One OpenAI message -> the chat-template shape {"role", "content": str, ...}."""
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise bad_request(f"'{where}' must be an object", where)
    role = msg.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    out = {"role": ROLES[role], "content": message_text(msg.get("content"), where, role == "assistant")}
    name = get_str(msg, "name", f"{where}.name")
    if name:
        out["name"] = name
    reasoning = get_str(msg, "reasoning_content", f"{where}.reasoning_content")
    if reasoning:  # an earlier turn's reasoning: templates that render it (Qwen3's, ...) get it, as llama.cpp's
        out["reasoning_content"] = reasoning
    if role == "assistant" and msg.get("tool_calls") is not None:
        calls = get_field(msg, "tool_calls", (list,), "an array", f"{where}.tool_calls")
        out["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    if role == "tool":
        call_id = get_str(msg, "tool_call_id", f"{where}.tool_call_id")
        if not call_id:
            raise bad_request(f"'{where}.tool_call_id' is required for role 'tool'", f"{where}.tool_call_id")
        out["tool_call_id"] = call_id
    return out


def message_text(content: Any, where: str, is_assistant: bool, join: str = "\n") -> str:
    """A string, or text parts joined by `join` (a newline, as llama.cpp and vLLM join them); null only for an
    assistant turn (tool calls only). Media parts are refused: the models served here are text-only."""
    if isinstance(content, str):
        return content
    if content is None and is_assistant:
        return ""
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or an array of content parts", f"{where}.content")
    return join.join(_part_text(part, f"{where}.content[{j}]", is_assistant) for j, part in enumerate(content))


def _part_text(part: Any, where: str, is_assistant: bool) -> str:
    kind = part.get("type") if isinstance(part, dict) else None
    kind = kind if isinstance(kind, str) else None
    if kind in MEDIA_PARTS:
        raise bad_request(f"'{where}' is a {kind} part: this server has no vision or audio input, "
                          "only text parts are accepted", f"{where}.type")
    key = "refusal" if kind == "refusal" and is_assistant else "text" if kind == "text" else None
    if key is None:
        raise bad_request(f"'{where}.type' must be 'text', got {kind!r}", f"{where}.type")
    text = part.get(key)
    if not isinstance(text, str):
        raise bad_request(f"'{where}.{key}' must be a string", f"{where}.{key}")
    return text


def _parse_logprobs(body: dict) -> tuple[bool, int]:
    """logprobs and top_logprobs, or llama-server's n_probs (the top n, logprobs implied)."""
    logprobs = bool(get_bool(body, "logprobs"))
    top = get_int(body, "top_logprobs", 0, 20)
    if top and not logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    n_probs = get_int(body, "n_probs", 0, 20)
    if n_probs and not logprobs:
        return True, n_probs
    return logprobs, top or 0


def parse_response_format(body: dict) -> dict | None:
    """The format for the grammar (prepare.grammar_spec): OpenAI's response_format (its nested
    json_schema, or llama-server's flat `schema`, which also narrows json_object), else llama-server's
    top-level json_schema ({}: any object); type "text" or neither: none. Every schema must be an
    object, and a GBNF `grammar` beside one is refused, as llama-server refuses it."""
    fmt = get_field(body, "response_format", (dict,), "an object")
    schema = get_field(body, "json_schema", (dict,), "a JSON Schema object")
    if fmt is not None and fmt.get("type") == "text":
        fmt = None
    if fmt is not None:
        _check_format(fmt)
        if schema is not None and fmt["type"] == "json_object" and "schema" not in fmt:
            fmt = {**fmt, "schema": schema}
    elif schema is not None:
        fmt = {"type": "json_schema", "schema": schema or {"type": "object"}}
    if fmt is not None and get_str(body, "grammar"):
        raise bad_request("give a GBNF 'grammar' or a JSON schema, not both", "grammar")
    return fmt


def _check_format(fmt: dict) -> None:
    if not isinstance(fmt.get("type"), str) or fmt.get("type") not in RESPONSE_FORMATS:
        raise bad_request(f"'response_format.type' must be one of {', '.join(sorted(RESPONSE_FORMATS))}, "
                          f"got {fmt.get('type')!r}", "response_format.type")
    if fmt["type"] == "json_schema" and not isinstance(fmt.get("json_schema"), dict) and "schema" not in fmt:
        raise bad_request("'response_format.json_schema' is required for type json_schema",
                          "response_format.json_schema")
    nested = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else {}
    for where, holder in (("response_format.schema", fmt), ("response_format.json_schema.schema", nested)):
        if "schema" in holder and not isinstance(holder["schema"], dict):
            raise bad_request(f"'{where}' must be a JSON Schema object", where)


def _chat_options(body: dict, messages: list[dict]) -> ChatOptions:
    """reasoning_effort, chat_template_kwargs, reasoning_format (llama-server's); a last assistant message is
    a prefill the reply continues (llama-server's; vLLM's continue_final_message says so explicitly, and
    with add_generation_prompt too is a 400, as both servers answer). Two assistant messages at the end are
    a 400, as llama-server's (which of them would the reply continue?)."""
    continue_final = get_bool(body, "continue_final_message")
    if continue_final and get_bool(body, "add_generation_prompt"):
        raise bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                          "continue_final_message")
    roles = [m["role"] for m in messages[-2:]]
    if roles == ["assistant", "assistant"]:
        raise bad_request("cannot have 2 or more assistant messages at the end of the list", "messages")
    prefill = roles[-1] == "assistant" and not messages[-1].get("tool_calls") and continue_final is not False
    reasoning_format = get_str(body, "reasoning_format")
    if reasoning_format is not None and reasoning_format not in REASONING_FORMATS:
        raise bad_request(f"'reasoning_format' must be one of {', '.join(REASONING_FORMATS)}, got "
                          f"{reasoning_format!r}", "reasoning_format")
    effort = get_str(body, "reasoning_effort")
    kwargs = get_field(body, "chat_template_kwargs", (dict,), "an object")
    return ChatOptions(template_kwargs=kwargs or {}, reasoning_format=reasoning_format, reasoning_effort=effort,
                       continue_final=prefill)


def _tool_choice(body: dict, tools: list[dict] | None) -> str | dict:
    """"none" | "auto" (the default) | "required" | {"type": "function", "function": {"name"}} -> {"name"}."""
    choice = get_field(body, "tool_choice", (str, dict), "a string or an object")
    if choice is None:
        return "auto"
    if isinstance(choice, str) and choice not in TOOL_CHOICES:
        raise bad_request(f"'tool_choice' must be none, auto, required or an object, got {choice!r}",
                          "tool_choice")
    if isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request("'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}", "tool_choice")
        choice = {"name": fn["name"]}
    return check_tool_choice(choice, tools)


def call_deltas(parts: list[ToolCallDelta]) -> list[dict]:
    """One Delta's call parts -> delta.tool_calls entries, one per call; id, type and name only on the
    entry that opens a call (the SDK concatenates every string it sees again)."""
    entries: dict[int, dict] = {}
    for part in parts:
        if part.index in entries:
            entries[part.index]["function"]["arguments"] += part.arguments
        elif part.id is None:
            entries[part.index] = {"index": part.index, "function": {"arguments": part.arguments}}
        else:
            entries[part.index] = {"index": part.index, "id": part.id, "type": "function",
                                   "function": {"name": part.name, "arguments": part.arguments}}
    return list(entries.values())


def chat_logprob(t: TokenLogprob, post_sampling: bool = False) -> dict:
    """One token's logprobs entry; post_sampling: llama-server's probabilities after the samplers instead."""
    if post_sampling:
        return probs_entry(t, True)
    return {"token": t.token, "logprob": t.logprob, "bytes": t.bytes,
            "top_logprobs": [{"token": x.token, "logprob": x.logprob, "bytes": x.bytes} for x in t.top]}


class ChatOutput(ChoicesOutput):
    """Engine events -> chat.completion (body) or chat.completion.chunk frames (stream).

    Stream order: one role chunk per choice, all sent first in index order (the SDK's accumulator
    places choices by list position, so every index must exist before any later one is touched),
    then content/reasoning chunks as fed, a finish chunk per choice with an empty delta, and in end()
    the usage chunk (include_usage) and [DONE]. As llama-server: the role chunk's content is null, every
    chunk has a system_fingerprint, and the last one before [DONE] (and the whole body) has `timings`; a
    stream that asked has a role chunk with `prompt_progress` per Progress event and `timings` on every chunk."""

    def __init__(self, req: GenRequest, meta: ResponseMeta, raw=None):
        """raw (a llamacpp_out.CompletionOutput fed the same events): llama-server's `__verbose`, the result
        as /completion gives it (its prompt as the template rendered it), beside `timings`."""
        super().__init__(req, meta)
        self._opened, self.raw = False, raw

    def _telemetry(self) -> dict:
        usage = self.usage()
        return {"timings": timings_body(usage), **({"__verbose": self.raw.body()} if self.raw else {})}

    def feed(self, ev: Delta | Finish | Progress) -> list[str]:
        if isinstance(ev, Progress):
            return [self._chunk(0, {"role": "assistant", "content": None}, extra=progress_fields(self.req, ev))] \
                if self.req.stream else []
        self.record(ev)
        if self.raw is not None:
            self.raw.feed(ev)
        if not self.req.stream:
            return []
        frames = self._open()
        if isinstance(ev, Finish):
            last = not self.req.include_usage and all(c.finish for c in self.choices)
            frames.append(self._chunk(ev.index, {}, finish_reason=CHAT_FINISH_REASONS[ev.reason],
                                      extra=self._telemetry() if last else {}))
            return frames
        delta = {}
        if ev.reasoning:
            delta["reasoning_content"] = ev.reasoning  # llama-server's (and DeepSeek's) field
        if ev.content:
            delta["content"] = ev.content
        if ev.tool_calls:
            delta["tool_calls"] = call_deltas(ev.tool_calls)
        if delta or ev.logprobs:
            frames.append(self._chunk(ev.index, delta, logprobs=self._logprobs(ev.logprobs) if ev.logprobs else None,
                                      extra=chunk_timings(ev.usage)))
        return frames

    def end(self) -> list[str]:
        if not self.req.stream:
            return []
        frames = self._open()
        if self.req.include_usage:
            usage = self.usage()
            frames.append(frame({**self._head(), "choices": [], "usage": usage_body(usage), **self._telemetry()}))
        return frames + [DONE]

    def body(self) -> dict:
        usage = self.usage()
        return {"id": self.meta.id, "object": "chat.completion", "created": self.meta.created,
                "model": self.meta.model, "system_fingerprint": BUILD_INFO,
                "choices": [self._choice_body(i) for i in range(self.req.n)], "usage": usage_body(usage),
                **self._telemetry()}

    def _choice_body(self, i: int) -> dict:
        state = self.choices[i]
        message = _message(state)
        reasoning = "".join(state.reasoning)
        if reasoning:
            message["reasoning_content"] = reasoning
        logprobs = self._logprobs(state.logprobs) if self.req.logprobs else None
        return {"index": i, "message": message, "logprobs": logprobs,
                "finish_reason": CHAT_FINISH_REASONS[state.finish.reason]}

    def _logprobs(self, tokens: list[TokenLogprob]) -> dict:
        return {"content": [chat_logprob(t, self.req.llama.post_sampling_probs) for t in tokens], "refusal": None}

    def _open(self) -> list[str]:
        if self._opened:
            return []
        self._opened = True
        return [self._chunk(i, {"role": "assistant", "content": None}) for i in range(self.req.n)]

    def _head(self) -> dict:
        return {"id": self.meta.id, "object": "chat.completion.chunk", "created": self.meta.created,
                "model": self.meta.model, "system_fingerprint": BUILD_INFO}

    def _chunk(self, index: int, delta: dict, logprobs: dict | None = None, finish_reason: str | None = None,
               extra: dict | None = None) -> str:
        chunk = {**self._head(), "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                              "finish_reason": finish_reason}], **(extra or {})}
        if self.req.include_usage:
            chunk["usage"] = None  # the SDK expects the key on every chunk once usage is asked for
        return frame(chunk)


def _message(state: ChoiceState) -> dict:
    """The assistant message: content null when there are tool calls and no text (as OpenAI sends it)."""
    content = "".join(state.content)
    message = {"role": "assistant", "content": content or (None if state.calls else ""), "refusal": None}
    if state.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.text}}
                                 for c in state.calls]
    return message
