"""Chat templates: render `tokenizer.chat_template` (untrusted jinja from a model file) in a sandbox.

The rendering environment mirrors HF transformers' `apply_chat_template` (the reference most templates are
written against): trim_blocks/lstrip_blocks, loop controls, `raise_exception`, `strftime_now` and a `tojson`
filter that keeps non-ASCII characters.
"""
import json
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEnvironment,
    modifies_known_mutable,
)

# ref: llama.cpp llm_chat_apply_template, LLM_CHAT_TEMPLATE_CHATML (used when a model has no template)
CHATML_SOURCE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


class ChatTemplateError(Exception):
    """A chat template failed to compile or render.

    `deliberate` is True when the template itself called raise_exception(msg); str(error) is then msg.
    """

    def __init__(self, message: str, deliberate: bool = False):
        super().__init__(message)
        self.deliberate = deliberate


class _TemplateRaised(jinja2.TemplateError):
    """Carries a template's own raise_exception message out of jinja."""


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # HF's filter: plain json.dumps, unlike jinja's HTML-escaping default
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_json_sequence)


def _json_sequence(value: Any) -> list:
    """`x | map(...)` and `| select` yield generators; llama.cpp's engine serialises them as arrays."""
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _GenerationTag(jinja2.ext.Extension):
    """HF's {% generation %}...{% endgeneration %} marks assistant text for training masks; a prompt
    renderer only needs the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


# ids of the containers the caller passed to the render in progress (alive during it, so ids are unique)
_CALLER_CONTAINERS: ContextVar[frozenset[int]] = ContextVar("caller_containers", default=frozenset())


def _container_ids(value: Any) -> frozenset[int]:
    found: set[int] = set()
    stack = [value]  # iterative: caller data may nest deeper than the recursion limit
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list, set, tuple)) and id(item) not in found:
            found.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return frozenset(found)


class _Environment(ImmutableSandboxedEnvironment):
    """Caller data (messages, tools, ...) stays immutable; lists and dicts the template built itself may
    grow (Kimi K2's template appends to a list in a namespace, as llama.cpp's engine allows)."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not SandboxedEnvironment.is_safe_attribute(self, obj, attr, value):
            return False
        return not modifies_known_mutable(obj, attr) or id(obj) not in _CALLER_CONTAINERS.get()


def _make_environment() -> ImmutableSandboxedEnvironment:
    env = _Environment(trim_blocks=True, lstrip_blocks=True,
                       extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _make_environment()


class ChatTemplate:
    """A compiled chat template; render() turns a message list into the prompt text."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _ENV.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template syntax error, line {e.lineno}: {e.message}") from None

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               tools: list[dict] | None = None, **extra: Any) -> str:
        """extra: template-specific variables (enable_thinking, date_string, documents, ...)."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                     "messages": messages, "add_generation_prompt": add_generation_prompt, "tools": tools}
        token = _CALLER_CONTAINERS.set(_container_ids(variables))
        try:
            return self._template.render(**variables)
        except _TemplateRaised as e:
            raise ChatTemplateError(e.message or "", deliberate=True) from None
        except jinja2.exceptions.SecurityError as e:
            raise ChatTemplateError(f"chat template blocked by the sandbox: {e}") from None
        except Exception as e:  # untrusted code: any failure inside it is the template's error
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from None
        finally:
            _CALLER_CONTAINERS.reset(token)


def default_template(bos_token: str = "", eos_token: str = "") -> ChatTemplate:
    """ChatML, the fallback llama.cpp uses for a model whose file carries no template."""
    return ChatTemplate(CHATML_SOURCE, bos_token=bos_token, eos_token=eos_token)
