"""Anthropic Messages API: POST /v1/messages and /v1/messages/count_tokens bodies -> GenRequest; the response
side (Message bodies, SSE events, errors) is in anthropic_out.py and re-exported here, so routes import
everything from this module (ref: shared/docs/protocols/anthropic.md; shapes checked against the anthropic SDK 2.14)."""
from __future__ import annotations

from typing import Any

from .anthropic_out import (
    MessagesOutput,
    count_tokens_body,
    error_body,
    error_status,
    stream_error,
)
from .base import ProtocolError, bad_request
from .openai_common import TOP_K_OFF
from .request import ChatOptions, GenRequest, Sampling, ToolOptions

__all__ = [
    "MessagesOutput", "count_tokens_body", "error_body", "error_status", "parse_count_tokens", "parse_messages",
    "stream_error",
]

JOIN = "\n"  # between text blocks of one message, and between merged consecutive same-role messages
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none", "tool": None}  # -> GenRequest's tool_choice


def parse_messages(body: Any) -> GenRequest:
    """POST /v1/messages body -> GenRequest; bad_request naming the field for anything malformed."""
    req = _parse_common(body)
    req.max_tokens = _int(body, "max_tokens", minimum=1, required=True)
    req.stream = _bool(body, "stream")
    req.stop = _stop_sequences(body.get("stop_sequences"))
    req.sampling, req.sampling_defaults = _sampling(body), ANTHROPIC_DEFAULTS
    return req


def parse_count_tokens(body: Any) -> GenRequest:
    """POST /v1/messages/count_tokens body (the messages body without max_tokens) -> GenRequest."""
    return _parse_common(body)


def _parse_common(body: Any) -> GenRequest:
    if not isinstance(body, dict):
        raise bad_request("body: must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model: must be a string", "model")
    messages = _system(body.get("system"))
    for msg in _messages(body.get("messages")):
        _append_merged(messages, msg)
    tools = _tools(body.get("tools"))
    tool_options = ToolOptions(*_tool_choice(body.get("tool_choice"), tools))
    thinking = _thinking(body["thinking"]) if body.get("thinking") is not None else None
    # continue_final: prefill, the reply continues the last (assistant) message's text
    return GenRequest(model=model or None, messages=messages, tools=tools, tool_options=tool_options,
                      chat=ChatOptions(thinking=thinking, continue_final=messages[-1]["role"] == "assistant"),
                      format=_output_format(body.get("output_config")))


# Only temperature has a documented API default (1.0). top_k / top_p have none in the API (and min_p does
# not exist there), so unset ones take llama.cpp's defaults (SamplingParams).
ANTHROPIC_DEFAULTS = Sampling(temperature=1.0)


def _sampling(body: dict) -> Sampling:
    return Sampling(temperature=_number(body, "temperature", 0.0, 1.0), top_p=_number(body, "top_p", 0.0, 1.0),
                    top_k=_top_k(_int(body, "top_k", minimum=TOP_K_OFF)))


def _top_k(value: int | None) -> int | None:
    return None if value is None else max(value, 0)


def _system(system: Any) -> list[dict]:
    """Top-level `system` (string or text blocks) -> [] or one leading system message."""
    if system is None:
        return []
    text = _text_only(system, "system")
    return [{"role": "system", "content": text}] if text else []


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages: must be a non-empty list", "messages")
    out: list[dict] = []
    for i, message in enumerate(raw):
        out.extend(_message(message, f"messages.{i}"))
    return out


def _message(message: Any, where: str) -> list[dict]:
    """One API message -> chat-template messages (a user message with tool results gives role "tool" ones)."""
    if not isinstance(message, dict):
        raise bad_request(f"{where}: must be an object", where)
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise bad_request(f"{where}.role: must be 'user', 'assistant' or 'system'", f"{where}.role")
    content = message.get("content")
    if role == "system" or isinstance(content, str):  # a system message inside `messages` (Claude Code sends them)
        return [{"role": role, "content": _text_only(content, f"{where}.content")}]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content: must be a string or a list of content blocks", f"{where}.content")
    return _blocks(role, content, f"{where}.content")


def _blocks(role: str, blocks: list, where: str) -> list[dict]:
    """A message's blocks -> chat-template messages. An assistant's thinking blocks are its reasoning_content
    (joined as they come, as llama.cpp joins them), which templates that render earlier reasoning (Qwen3's,
    ...) show; a redacted_thinking block is accepted and left out (its text is not readable)."""
    out: list[dict] = []
    texts: list[str] = []
    thoughts: list[str] = []
    tool_calls: list[dict] = []
    for j, block in enumerate(blocks):
        path = f"{where}.{j}"
        kind = _block_type(block, path)
        if kind == "text":
            texts.append(_str(block, "text", path))
        elif kind == "tool_use" and role == "assistant":
            tool_calls.append(_tool_call(block, path))
        elif kind == "tool_result" and role == "user":
            if texts:  # text before a result stays before it
                out.append({"role": "user", "content": JOIN.join(texts)})
                texts = []
            out.append(_tool_result(block, path))
        elif kind == "thinking" and role == "assistant":
            thoughts.append(block["thinking"] if isinstance(block.get("thinking"), str) else "")
        elif kind in ("tool_use", "tool_result"):
            raise bad_request(f"{path}: a {kind} block cannot appear in a {role} message", path)
        elif kind not in ("thinking", "redacted_thinking"):  # a user's echoed thinking: accepted, left out
            raise _unsupported(kind, path)
    if role == "assistant":
        msg: dict = {"role": "assistant", "content": JOIN.join(texts)}
        if "".join(thoughts):
            msg["reasoning_content"] = "".join(thoughts)
        return [msg | {"tool_calls": tool_calls}] if tool_calls else [msg]
    if texts or not out:
        out.append({"role": "user", "content": JOIN.join(texts)})
    return out


def _block_type(block: Any, path: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad_request(f"{path}: must be a content block object with a string `type`", path)
    return block["type"]


def _unsupported(kind: str, path: str) -> ProtocolError:
    if kind in ("image", "document"):
        return bad_request(f"{path}: {kind} blocks are not supported (text-only models)", path)
    return bad_request(f"{path}.type: unsupported content block type {kind!r}", f"{path}.type")


def _text_only(content: Any, where: str) -> str:
    """A string, or a list of text blocks joined (system prompts, tool results)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: must be a string or a list of text blocks", where)
    texts = []
    for j, block in enumerate(content):
        kind = _block_type(block, f"{where}.{j}")
        if kind != "text":
            raise _unsupported(kind, f"{where}.{j}")
        texts.append(_str(block, "text", f"{where}.{j}"))
    return JOIN.join(texts)


def _tool_call(block: dict, path: str) -> dict:
    """tool_use block -> a chat-template tool call (arguments as an object, as HF templates expect)."""
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise bad_request(f"{path}.input: must be an object", f"{path}.input")
    return {"id": _str(block, "id", path), "type": "function",
            "function": {"name": _str(block, "name", path), "arguments": arguments}}


def _tool_result(block: dict, path: str) -> dict:
    # is_error has no place in the template shape; the result text carries what the tool said
    content = block.get("content")
    text = "" if content is None else _text_only(content, f"{path}.content")
    return {"role": "tool", "content": text, "tool_call_id": _str(block, "tool_use_id", path)}


def _append_merged(out: list[dict], msg: dict) -> None:
    """Consecutive turns of the same role are one turn upstream; tool results stay one message each."""
    last = out[-1] if out else None
    if last is None or last["role"] != msg["role"] or msg["role"] == "tool":
        out.append(msg)
        return
    last["content"] = JOIN.join(t for t in (last["content"], msg["content"]) if t)
    if msg.get("reasoning_content"):
        last["reasoning_content"] = last.get("reasoning_content", "") + msg["reasoning_content"]
    if msg.get("tool_calls"):
        last["tool_calls"] = last.get("tool_calls", []) + msg["tool_calls"]


def _tools(raw: Any) -> list[dict] | None:
    """Client tools -> the chat-template (OpenAI function) shape. Server tools (versioned `type`, no
    input_schema) cannot run here: 400."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise bad_request("tools: must be a list", "tools")
    return [_tool(tool, f"tools.{i}") for i, tool in enumerate(raw)] or None


def _tool(tool: Any, where: str) -> dict:
    if not isinstance(tool, dict):
        raise bad_request(f"{where}: must be an object", where)
    if tool.get("type") not in (None, "custom"):
        raise bad_request(f"{where}.type: server tool {tool['type']!r} is not supported", f"{where}.type")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise bad_request(f"{where}.input_schema: must be a JSON schema object with type 'object'",
                          f"{where}.input_schema")
    function = {"name": _str(tool, "name", where), "parameters": schema}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, tools: list[dict] | None) -> tuple[str | dict, bool]:
    """{"type": auto|any|tool|none, "name"?, "disable_parallel_tool_use"?} -> (tool_choice as GenRequest
    has it: "auto" | "required" | {"name"} | "none", parallel tool calls allowed)."""
    if choice is None:
        return "auto", True
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str) or choice.get("type") not in _TOOL_CHOICES:
        raise bad_request("tool_choice.type: must be one of " + ", ".join(_TOOL_CHOICES), "tool_choice.type")
    disable = choice.get("disable_parallel_tool_use", False)
    if not isinstance(disable, bool):
        raise bad_request("tool_choice.disable_parallel_tool_use: must be a boolean",
                          "tool_choice.disable_parallel_tool_use")
    names = [tool["function"]["name"] for tool in tools or []]
    if choice["type"] in ("any", "tool") and not names:
        raise bad_request(f"tool_choice.type: {choice['type']!r} needs tools, and none were given", "tool_choice.type")
    normal = _TOOL_CHOICES[choice["type"]] or {"name": _str(choice, "name", "tool_choice")}
    if isinstance(normal, dict) and normal["name"] not in names:
        raise bad_request(f"tool_choice.name: tool {normal['name']!r} is not among tools ({', '.join(names)})",
                          "tool_choice.name")
    return normal, not disable


def _thinking(thinking: Any) -> dict:
    if not isinstance(thinking, dict) or not isinstance(thinking.get("type"), str):
        raise bad_request("thinking: must be an object with a string `type`", "thinking")
    return thinking


def _output_format(config: Any) -> dict | None:
    """output_config.format {"type": "json_schema", "schema": {...}} -> the JSON schema (structured output)."""
    fmt = config.get("format") if isinstance(config, dict) else None
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad_request("output_config.format: must be {type: 'json_schema', schema: {...}}",
                          "output_config.format")
    return fmt["schema"]


def _stop_sequences(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        raise bad_request("stop_sequences: must be a list of non-empty strings", "stop_sequences")
    return list(raw)


def _str(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise bad_request(f"{where}.{key}: a string is required", f"{where}.{key}")
    return value


def _bool(body: dict, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise bad_request(f"{key}: must be a boolean", key)
    return value


def _int(body: dict, key: str, minimum: int, required: bool = False) -> int | None:
    value = body.get(key)
    if value is None:
        if required:
            raise bad_request(f"{key}: Field required", key)
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad_request(f"{key}: must be an integer >= {minimum}", key)
    return value


def _number(body: dict, key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise bad_request(f"{key}: must be a number between {low} and {high}", key)
    return float(value)
