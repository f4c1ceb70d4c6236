"""One request's tool-call plan: what the template renders, which format the output is read in, and the
grammar that constrains it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from ..chat.reasoning import OPEN as THINK
from .formats import GENERIC, CallFormat, detect
from .harmony import is_harmony
from .grammar import tool_grammar
from .polyfill import adapt, caps
from .pythonic import calls_text


@dataclass
class ToolPlan:
    messages: list[dict]  # what the template renders (polyfilled where it lacks tool support)
    tools: list[dict] | None  # passed to the template (None when it cannot render them)
    fmt: CallFormat | None  # the output is read for calls in this format (None: plain content)
    lark: str | None  # the grammar constraining the output (None: unconstrained)


def check_choice(choice) -> None:
    if choice not in ("auto", "none", "required") and not (isinstance(choice, dict) and "name" in choice):
        raise ValueError(f"tool_choice must be auto, none, required or a named function, got {choice!r}")


def plan(source: str, messages: list[dict], tools: list[dict] | None, tokenizer, choice: str | dict = "auto",
         parallel: bool = True, opened: bool = False) -> ToolPlan:
    """source: the chat template; tools in the chat-template shape; choice: "auto", "none", "required" or
    {"name": function}; parallel: several calls allowed; opened: the rendered prompt ends inside <think>
    (chat/reasoning.opened). ValueError for a named function that is not offered."""
    check_choice(choice)
    found = caps(source)
    if not tools:
        return ToolPlan(adapt(found, messages, None), None, None, None)
    tools = [_complete(t) for t in tools]
    names = [t["function"]["name"] for t in tools]
    if isinstance(choice, dict) and choice["name"] not in names:
        raise ValueError(f"tool_choice names {choice['name']!r}, which is not among the tools offered "
                         f"({', '.join(names)})")
    if is_harmony(source):  # gpt-oss: its template renders the tools; calls are read as harmony messages
        return ToolPlan(adapt(found, messages, tools), tools, None, None)  # (tool_choice is not enforced)
    fmt = detect(source, found.supports_tools)
    if fmt is GENERIC:  # a format llamay cannot read: the tools are described the generic way instead
        found = replace(found, supports_tools=False)
    # "none" still renders the tools (the prompt, and so its cached prefix, stays the same turn to turn);
    # calls are neither constrained nor read, except that the generic form keeps its answer wrapper
    if fmt.args == "xml":  # its values are typed by the parameter schemas
        fmt = fmt.with_tools(tools)
    # a template that lists tools but does not render calls (LFM2's older ones) sees them as the model writes them
    messages = adapt(found, messages, tools, partial(calls_text, fmt) if fmt.args == "python" else None)
    if choice == "none" and fmt is not GENERIC:
        return ToolPlan(messages, tools if found.supports_tools else None, None, None)
    lark = tool_grammar(fmt, tools, choice, parallel, tokenizer, think="opened" if opened else THINK in source)
    return ToolPlan(messages, tools if found.supports_tools else None, fmt, lark)


def _complete(tool: dict) -> dict:
    """Templates read description and parameters unguarded (Hermes, Llama 3.1): give them both."""
    fn = tool["function"]
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    return {**tool, "function": {**fn, "description": fn.get("description") or "", "parameters": params}}
