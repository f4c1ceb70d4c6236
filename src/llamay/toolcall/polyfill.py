"""What a chat template can render about tools, found by probing it, and the message rewrites ("polyfills")
that let any template carry tools, calls and results without losing them.

caps(source) renders small probe conversations carrying marker strings (a tool name, an argument value, a
tool result) and checks which markers reach the output, as minja / llama.cpp's chat template capability
detection does. adapt(caps, messages, tools) then rewrites the messages in the chat-template (OpenAI chat)
shape into ones that template renders; the caller renders them with the same `tools`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Callable

from llamay.chat.template import ChatTemplate, ChatTemplateError, ChatTemplateLimit

_NAME = "probe_fn_k7q2"
_KEY = "probe_key_w3z8"
_VALUES = ("probe_value_x4v9", "probe_value_m5n1")
_RESULT = "probe_result_j6h3"
_SYSTEM = "probe_system_t2p7"
_USER = "probe_user_r8d4"
_ROLE = "probe_role_c9f5"
_LONG_ID = "call_a1b2c3d4e5f6g7h8i9j0k1l2"  # the engine's id shape: "call_" + 24 alphanumerics
_SHORT_ID = "a1b2c3d4e"  # Mistral templates insist on 9 alphanumerics
_USER_MESSAGE = {"role": "user", "content": _USER}
_SHORT_ID_RE = re.compile(r"[A-Za-z0-9]{9}")
_PROBE_TOOL = {"type": "function", "function": {
    "name": _NAME, "description": "probe tool",
    "parameters": {"type": "object", "required": [_KEY],
                   "properties": {_KEY: {"type": "string", "description": "probe argument"}}}}}


@dataclass(frozen=True)
class TemplateCaps:
    """What a template renders faithfully; every field is found by rendering probes."""
    supports_system_role: bool = False  # a system message's text appears
    supports_tools: bool = False  # the `tools` list appears
    supports_tool_calls: bool = False  # an assistant turn's `tool_calls` appear
    supports_parallel_tool_calls: bool = False  # two calls in one assistant turn both appear
    supports_tool_responses: bool = False  # a role "tool" message's content appears
    requires_object_arguments: bool = False  # call arguments must be a mapping (JSON text breaks or is escaped)
    requires_string_arguments: bool = False  # call arguments must be JSON text (a mapping breaks)
    requires_non_null_content: bool = False  # an assistant turn with calls needs content "" instead of None
    requires_short_call_ids: bool = False  # call ids must be 9 alphanumerics
    requires_alternating_roles: bool = False  # two user turns in a row are refused


def caps(source: str, extra: dict[str, Any] | None = None) -> TemplateCaps:
    """Probe a template's capabilities; `extra`: template-specific variables it needs to render at all.
    Cached per (source, extra): it runs once per model. ChatTemplateError if the source does not compile."""
    return _caps_cached(source, json.dumps(extra or {}, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _caps_cached(source: str, extra_json: str) -> TemplateCaps:
    return _Prober(ChatTemplate(source), json.loads(extra_json)).run()


class _Prober:
    def __init__(self, template: ChatTemplate, extra: dict[str, Any]):
        self.template = template
        self.extra = extra
        self.tools: list[dict] | None = None
        self.limited = False  # a probe ran into a render limit: the template is not probed further

    def render(self, messages: list[dict], generation_prompt: bool = True) -> str:
        """The template's output, or "" when it refuses or fails on these messages. Probes render under
        the same limits as requests; after one runs into a limit the rest are skipped (a template that
        never finishes would otherwise cost the time limit once per probe)."""
        if self.limited:
            return ""
        try:
            return self.template.render(messages, add_generation_prompt=generation_prompt, tools=self.tools,
                                        **self.extra)
        except ChatTemplateLimit:
            self.limited = True
            return ""
        except ChatTemplateError:  # a refused or failing probe only means "not supported"
            return ""

    def run(self) -> TemplateCaps:
        self.tools = [_PROBE_TOOL]
        found = TemplateCaps(supports_tools=_NAME in self.render([_USER_MESSAGE]))
        # later probes pass the tools list where the template renders one: some need it (Command-R tool_use)
        self.tools = [_PROBE_TOOL] if found.supports_tools else None
        found = replace(found, supports_system_role=_SYSTEM in self.render(
            [{"role": "system", "content": _SYSTEM}, _USER_MESSAGE]))
        found = replace(found, requires_alternating_roles=self._requires_alternation())
        found = self._probe_calls(found)
        return self._probe_responses(found)

    def _requires_alternation(self) -> bool:
        """Two user turns in a row are refused (or lose one), while user/assistant/user renders."""
        second = {"role": "user", "content": _VALUES[1]}
        alternating = self.render([_USER_MESSAGE, {"role": "assistant", "content": _VALUES[0]}, second])
        repeated = self.render([_USER_MESSAGE, second])
        return _VALUES[1] in alternating and not (_USER in repeated and _VALUES[1] in repeated)

    def _probe_calls(self, found: TemplateCaps) -> TemplateCaps:
        """Tries call ids long then short, content "" and None, arguments as a mapping and as JSON text."""
        for short_ids in (False, True):
            call_id = _SHORT_ID if short_ids else _LONG_ID
            by_content = {content: {form: self._call_quality(args, call_id, content)
                                    for form, args in _argument_forms()} for content in ("", None)}
            best = max(max(by_form.values()) for by_form in by_content.values())
            if best == 0:
                continue
            content = "" if max(by_content[""].values()) == best else None
            by_form = by_content[content]
            form = "object" if by_form["object"] >= by_form["string"] else "string"
            null_breaks = content == "" and (max(by_content[None].values()) < best
                                             or self._null_breaks_later(call_id, form))
            return replace(found, supports_tool_calls=True, requires_short_call_ids=short_ids,
                           requires_object_arguments=by_form["object"] > by_form["string"],
                           requires_string_arguments=by_form["string"] > by_form["object"],
                           requires_non_null_content=null_breaks,
                           supports_parallel_tool_calls=self._renders_parallel(short_ids, form, content))
        return found

    def _call_quality(self, arguments: Any, call_id: str, content: str | None) -> int:
        """2: the argument value appears as JSON or XML-like text; 1: only escaped or as a Python repr;
        0: missing or the render failed."""
        text = self.render([_USER_MESSAGE, _call_message([(call_id, arguments)], content)],
                           generation_prompt=False)
        value = _VALUES[0]
        if value not in text:
            return 0
        return 1 if f'\\"{value}' in text or f"'{value}'" in text else 2

    def _null_breaks_later(self, call_id: str, form: str) -> bool:
        """Content None fails where "" renders, with the call followed by a result or a user turn (some
        templates only touch the content of a turn that is not the last)."""
        arguments = _arguments(_VALUES[0], form)

        def renders(content: str | None, follower: dict) -> bool:
            call = _call_message([(call_id, arguments)], content)
            return _VALUES[0] in self.render([_USER_MESSAGE, call, follower])
        followers = ({"role": "tool", "tool_call_id": call_id, "content": _RESULT}, _USER_MESSAGE)
        return any(renders("", follower) and not renders(None, follower) for follower in followers)

    def _renders_parallel(self, short_ids: bool, form: str, content: str | None) -> bool:
        calls = [(_SHORT_ID if short_ids else _LONG_ID, _arguments(_VALUES[0], form)),
                 ("b2c3d4e5f" if short_ids else _LONG_ID[:-1] + "x", _arguments(_VALUES[1], form))]
        text = self.render([_USER_MESSAGE, _call_message(calls, content)], generation_prompt=False)
        return all(value in text for value in _VALUES)

    def _probe_responses(self, found: TemplateCaps) -> TemplateCaps:
        """A tool result after the call as adapt() would present that call to this template. Rendering role
        "tool" like any unknown role counts only in a template that knows tools (LFM2 uses the role as its
        format); plain ChatML, which knows no tools, merely echoes role names."""
        assumed = replace(found, supports_tool_responses=True)

        def text(role: str) -> str:
            messages = [_USER_MESSAGE, _call_message([(_LONG_ID, {_KEY: _VALUES[0]})], None),
                        {"role": role, "tool_call_id": _LONG_ID, "content": _RESULT}]
            return self.render(adapt(assumed, messages, None))
        as_tool = text("tool")
        generic = text(_ROLE).replace(_ROLE, "tool") == as_tool
        knows_tools = found.supports_tools or found.supports_tool_calls
        return replace(found, supports_tool_responses=_RESULT in as_tool and (knows_tools or not generic))


def _argument_forms() -> list[tuple[str, Any]]:
    return [(form, _arguments(_VALUES[0], form)) for form in ("object", "string")]


def _arguments(value: str, form: str) -> Any:
    arguments = {_KEY: value}
    return arguments if form == "object" else json.dumps(arguments)


def _call_message(calls: list[tuple[str, Any]], content: str | None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": _NAME, "arguments": arguments}}
        for call_id, arguments in calls]}


def adapt(caps: TemplateCaps, messages: list[dict], tools: list[dict] | None,
          call_text: Callable[[list[dict]], str] | None = None) -> list[dict]:
    """Messages (chat-template shape) rewritten so a template with these caps renders all of them.

    Call arguments given as JSON text become mappings (kept as text when not a JSON object, or when the
    template requires text); calls and results a template cannot render become JSON text in llama.cpp's
    generic form; tools it cannot list go into the system message with instructions for the generic JSON
    answer (the same text whatever the tool_choice, so a conversation's prompt prefix stays the same from
    turn to turn; the grammar is what forces a call). The input is not modified. Render the result with
    the same `tools`."""
    calls = _CallBook(caps)
    adapted = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            adapted.append(_adapt_calls(caps, message, calls, call_text))
        elif message.get("role") == "tool":
            adapted.append(_adapt_result(caps, message, calls))
        else:
            adapted.append(_non_null(caps, dict(message)))
    if tools and not caps.supports_tools:
        adapted = _with_system_text(adapted, tools_prompt(tools))
    if not caps.supports_system_role:
        adapted = _fold_system(adapted)
    if caps.requires_alternating_roles:
        adapted = _merge_user_runs(adapted)
    return adapted


def tools_prompt(tools: list[dict]) -> str:
    """System text listing the tools for a template that cannot, and the generic JSON answer forms."""
    listing = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools)
    lines = ["You can call these tools (one JSON definition per line):", listing, "",
             "To call tools, reply with only a JSON object of this form:",
             '{"tool_calls": [{"name": "<function name>", "arguments": {<arguments as a JSON object>}}]}',
             "To answer directly without a tool, reply with only:", '{"response": "<your answer>"}']
    return "\n".join(lines)


class _CallBook:
    """Call ids (as the template will see them) and names of the calls made so far, so that a tool result
    finds its call by id, or else takes the oldest unanswered call."""

    def __init__(self, caps: TemplateCaps):
        self.short_ids = caps.requires_short_call_ids
        self.names: dict[str, str] = {}
        self.pending: list[tuple[str | None, str]] = []
        self.n_calls = 0

    def add(self, call_id: str | None, name: str) -> str | None:
        self.n_calls += 1
        if self.short_ids:
            call_id = _short_id(call_id if call_id is not None else f"call-{self.n_calls}")
        if call_id is not None:
            self.names[call_id] = name
        self.pending.append((call_id, name))
        return call_id

    def answer(self, message: dict) -> tuple[str | None, str | None]:
        """(call id as rendered, function name) for a tool message."""
        call_id = message.get("tool_call_id")
        if call_id is not None and self.short_ids:
            call_id = _short_id(call_id)
        index = next((i for i, (pending_id, _) in enumerate(self.pending)
                      if call_id is None or pending_id == call_id), None)
        entry = self.pending.pop(index) if index is not None else (call_id, None)
        call_id = entry[0] if call_id is None else call_id
        name = message.get("name") or self.names.get(call_id) or entry[1]
        return call_id, name


def _short_id(call_id: str) -> str:
    """A stable 9-alphanumeric id (the same input gives the same id on every turn)."""
    if _SHORT_ID_RE.fullmatch(call_id):
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _adapt_calls(caps: TemplateCaps, message: dict, book: _CallBook, call_text) -> dict:
    calls = [_adapt_call(caps, call, book) for call in message["tool_calls"]]
    renders = caps.supports_tool_calls and (len(calls) == 1 or caps.supports_parallel_tool_calls)
    if renders:
        return _non_null(caps, {**message, "tool_calls": calls})
    adapted = {key: value for key, value in message.items() if key != "tool_calls"}
    if call_text is not None:
        content, text = message.get("content"), call_text(calls)
        adapted["content"] = content + text if isinstance(content, str) else _join(content, text)
        return adapted
    payload: dict[str, Any] = {"tool_calls": [
        {"name": call["function"]["name"], "arguments": call["function"]["arguments"]} for call in calls]}
    if message.get("content"):
        payload["content"] = message["content"]
    adapted["content"] = json.dumps(payload, ensure_ascii=False)
    return adapted


def _adapt_call(caps: TemplateCaps, call: dict, book: _CallBook) -> dict:
    function = dict(call.get("function") or {})
    function["arguments"] = _arguments_for(caps, function.get("arguments"))
    adapted = {**call, "function": function}
    call_id = book.add(call.get("id"), function.get("name", ""))
    if call_id is not None:
        adapted["id"] = call_id
    return adapted


def _arguments_for(caps: TemplateCaps, arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
        if isinstance(parsed, dict):
            arguments = parsed
    if caps.requires_string_arguments and not isinstance(arguments, str):
        return json.dumps(arguments, ensure_ascii=False)
    return arguments


def _adapt_result(caps: TemplateCaps, message: dict, book: _CallBook) -> dict:
    call_id, name = book.answer(message)
    if not caps.supports_tool_responses:
        response = {"tool_response": {"tool": name, "content": message.get("content")}}
        return {"role": "user", "content": json.dumps(response, ensure_ascii=False)}
    adapted = _non_null(caps, dict(message))
    if call_id is not None:
        adapted["tool_call_id"] = call_id
    if name is not None:
        adapted.setdefault("name", name)
    return adapted


def _non_null(caps: TemplateCaps, message: dict) -> dict:
    if caps.requires_non_null_content and message.get("content") is None:
        message["content"] = ""
    return message


def _with_system_text(messages: list[dict], text: str) -> list[dict]:
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        return [{**first, "content": _join(first.get("content"), text)}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _fold_system(messages: list[dict]) -> list[dict]:
    """The system text leads the first user message, for a template without a system role."""
    if not messages or messages[0].get("role") != "system":
        return messages
    system, rest = messages[0], messages[1:]
    for i, message in enumerate(rest):
        if message.get("role") == "user":
            merged = {**message, "content": _join(system.get("content"), message.get("content"))}
            return [*rest[:i], merged, *rest[i + 1:]]
    return [{**system, "role": "user"}, *rest]


def _merge_user_runs(messages: list[dict]) -> list[dict]:
    """Consecutive user messages (a converted tool result, then the user's next turn) as one."""
    merged: list[dict] = []
    for message in messages:
        if merged and message.get("role") == "user" and merged[-1].get("role") == "user":
            merged[-1] = {**merged[-1], "content": _join(merged[-1].get("content"), message.get("content"))}
        else:
            merged.append(message)
    return merged


def _join(first: Any, second: Any) -> Any:
    """Two contents (text or lists of typed parts), first then second, blank line between."""
    if first in (None, "", []):
        return second
    if second in (None, "", []):
        return first
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    return [*_parts(first), {"type": "text", "text": "\n\n"}, *_parts(second)]


def _parts(content: Any) -> list:
    return content if isinstance(content, list) else [{"type": "text", "text": str(content)}]
