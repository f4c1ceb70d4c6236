"""Tool calls as the engine streams them (ToolCallDelta parts) accumulated into whole calls, for every API's
output side; pure data, no API shapes (ref: the ToolCallDelta contract in base.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ...events import ToolCallDelta


@dataclass
class ToolCall:
    """One tool call as it accumulates: arguments is the list of JSON text fragments."""
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    def add(self, part: ToolCallDelta) -> None:
        self.arguments.append(part.arguments)

    @property
    def text(self) -> str:
        return "".join(self.arguments)

    def arguments_object(self) -> dict:
        return arguments_object(self.text, self.name)


def arguments_object(text: str, name: str) -> dict:
    """A call's joined argument fragments as an object, for the APIs whose calls carry one (Anthropic's
    input, Ollama's arguments). The grammar makes them a JSON object; only a call cut off by max_tokens
    is incomplete text, and then it is given as {} (the response says it ended at the length limit)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"tool call {name!r}: arguments are not a JSON object: {text!r}")
    return value


def add_call_part(calls: list[ToolCall], part: ToolCallDelta) -> ToolCall:
    """Appends `part` to its call in `calls` (a first part, carrying id and name, opens call part.index)."""
    if part.index == len(calls):
        if part.id is None or part.name is None:
            raise ValueError(f"tool call {part.index}: its first delta must carry the id and name")
        calls.append(ToolCall(part.id, part.name))
    elif part.index != len(calls) - 1:
        raise ValueError(f"tool call {part.index} out of order: {len(calls)} calls so far")
    calls[part.index].add(part)
    return calls[part.index]
