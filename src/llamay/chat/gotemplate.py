"""The plain forms of Ollama's Go prompt templates: {{ .System }}, {{ .Prompt }} and {{ .Response }},
with Go's {{- / -}} whitespace trims. Anything else ({{ if }}, {{ range }}, ...) is refused, not guessed."""
from __future__ import annotations

import re

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_FIELDS = {".System", ".Prompt", ".Response"}


class GoTemplateError(ValueError):
    pass


def render_go(template: str, system: str, prompt: str) -> str:
    values = {".System": system, ".Prompt": prompt, ".Response": ""}
    out, pos, trim_next = "", 0, False
    for m in _ACTION.finditer(template):
        left_trim, action, right_trim = m.groups()
        if action not in _FIELDS:
            raise GoTemplateError(f"template action {{{{ {action} }}}} is not supported; "
                                  "only {{ .System }}, {{ .Prompt }} and {{ .Response }} are")
        text = template[pos:m.start()]
        text = text.lstrip() if trim_next else text
        out += (text.rstrip() if left_trim else text) + values[action]
        pos, trim_next = m.end(), bool(right_trim)
    tail = template[pos:]
    return out + (tail.lstrip() if trim_next else tail)
