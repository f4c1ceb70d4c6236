"""Chat templates: render `tokenizer.chat_template` (untrusted jinja from a model file) in a sandbox.

The rendering environment mirrors HF transformers' `apply_chat_template` (the reference most templates are
written against): trim_blocks/lstrip_blocks, loop controls, `raise_exception`, `strftime_now` and a `tojson`
filter that keeps non-ASCII characters. Renders run under limits (limits.py: time, loop steps, sizes,
memory) and can be cancelled from another thread; sandbox.py has the checks.
"""
import functools
import json
import threading
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import SecurityError

from .limits import (ACTIVE, DEFAULT_LIMITS, MAX_NESTING, MAX_SOURCE_CHARS, Budget, LimitExceeded,
                     RenderLimits, container_ids, current, measure, using)
from .sandbox import GuardedEnvironment

# ref: llama.cpp llm_chat_apply_template, LLM_CHAT_TEMPLATE_CHATML (used when a model has no template)
CHATML_SOURCE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
_COMPILE_LIMITS = RenderLimits(seconds=float("inf"))  # compiling folds constants through the same checks
_MESSAGE_CHARS = 300  # an error message is one line of at most this many characters


class ChatTemplateError(Exception):
    """A chat template failed to compile or render.

    `deliberate` is True when the template itself called raise_exception(msg); str(error) is then msg.
    """

    def __init__(self, message: str, deliberate: bool = False):
        super().__init__(message)
        self.deliberate = deliberate


class ChatTemplateLimit(ChatTemplateError):
    """A render (or compile) crossed one of the limits in limits.py; the message names the limit."""


class ChatTemplateCancelled(ChatTemplateError):
    """The caller cancelled the render (its `cancel` event was set)."""


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
    """`x | map(...)` and `| select` yield generators; llama.cpp's engine serialises them as arrays (each
    one measured, as the filter's arguments were)."""
    if isinstance(value, Iterator):
        budget = current()
        items = budget.admit(list(value))
        measure(items, budget)
        return items
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _GenerationTag(jinja2.ext.Extension):
    """HF's {% generation %}...{% endgeneration %} marks assistant text for training masks; a prompt
    renderer only needs the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _make_environment() -> GuardedEnvironment:
    env = GuardedEnvironment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[jinja2.ext.loopcontrols, _GenerationTag])
    env.set_filter("tojson", _tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _make_environment()


@functools.lru_cache(maxsize=32)
def _compiled(source: str) -> jinja2.Template | tuple[type[ChatTemplateError], str]:
    """The compiled template, or the error saying why it does not compile (class and message: a fresh
    error is raised each time); once per source, ~30 ms for a large one."""
    try:
        if len(source) > MAX_SOURCE_CHARS:
            raise LimitExceeded(f"the chat template is over its limit of {MAX_SOURCE_CHARS:,} characters")
        _check_nesting(source)
        with using(Budget(_COMPILE_LIMITS)):
            return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        return ChatTemplateError, f"chat template syntax error, line {e.lineno}: {_one_line(e.message)}"
    except LimitExceeded as e:
        return ChatTemplateLimit, str(e)
    except RecursionError:
        return ChatTemplateError, "the chat template nests too deeply to compile"
    except Exception as e:  # untrusted source: anything the compiler trips on is the template's error
        return ChatTemplateError, f"the chat template does not compile: {type(e).__name__}: {_one_line(e)}"


_OPENERS = frozenset({"for", "if", "macro", "call", "filter", "with", "block", "autoescape", "generation"})
_OPEN_BRACKETS, _CLOSE_BRACKETS = frozenset("([{"), frozenset(")]}")


def _check_nesting(source: str) -> None:
    """Refuses a source nesting blocks and brackets past MAX_NESTING (jinja's parser and compiler recurse
    per level), before compiling it. A source the lexer rejects is left to the compiler to report."""
    depth, tag_next, in_set, set_depth = 0, False, False, 0
    try:
        for _, kind, value in _ENV.lexer.tokeniter(source, None):
            if kind == "whitespace":
                continue
            if tag_next:
                tag_next = False
                depth += kind == "name" and value in _OPENERS
                depth -= kind == "name" and value.startswith("end")
                in_set, set_depth = kind == "name" and value == "set", depth
            elif kind == "block_begin":
                tag_next = True
            elif kind == "operator":
                depth += value in _OPEN_BRACKETS
                depth -= value in _CLOSE_BRACKETS
                in_set = in_set and not (value == "=" and depth == set_depth)
            elif kind == "block_end":
                depth += in_set  # {% set x %}...{% endset %}: a block
                in_set = False
            if depth > MAX_NESTING:
                raise LimitExceeded(f"the chat template nests blocks or brackets past its limit of "
                                    f"{MAX_NESTING} levels")
    except jinja2.TemplateSyntaxError:
        return


def _one_line(error: Any) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= _MESSAGE_CHARS else line[:_MESSAGE_CHARS - 3] + "..."


class ChatTemplate:
    """A compiled chat template; render() turns a message list into the prompt text."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "",
                 limits: RenderLimits = DEFAULT_LIMITS):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.limits = limits
        compiled = _compiled(source)
        if isinstance(compiled, tuple):
            raise compiled[0](compiled[1])
        self._template = compiled

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               tools: list[dict] | None = None, cancel: threading.Event | None = None, **extra: Any) -> str:
        """extra: template-specific variables (enable_thinking, date_string, documents, ...). cancel: set
        from another thread to stop the render (ChatTemplateCancelled). Any failure is a ChatTemplateError
        with a one-line message; ChatTemplateLimit when a limit stopped it."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                     "messages": messages, "add_generation_prompt": add_generation_prompt, "tools": tools}
        budget = Budget(self.limits, cancel, container_ids(variables))
        token = ACTIVE.set(budget)
        try:
            text = _ENV.concat(self._template.root_render_func(self._template.new_context(variables)))
        except Exception as e:  # untrusted code: any failure inside it is the template's error
            raise self._error(e, budget) from None
        finally:
            ACTIVE.reset(token)
        if budget.tripped is not None:  # crossed inside code that swallowed the error
            raise self._error(budget.tripped, budget)
        return text

    def _error(self, error: Exception, budget: Budget) -> ChatTemplateError:
        error = budget.tripped or error  # a limit error that something turned into another one
        if isinstance(error, LimitExceeded):
            return (ChatTemplateCancelled if error.cancelled else ChatTemplateLimit)(str(error))
        if isinstance(error, _TemplateRaised):
            return ChatTemplateError(error.message or "", deliberate=True)
        where = _template_line(self._template, error.__traceback__)
        if isinstance(error, SecurityError):
            return ChatTemplateError(f"chat template blocked by the sandbox{where}: {_one_line(error)}")
        if isinstance(error, RecursionError):
            return ChatTemplateError(f"the chat template nests or recurses too deeply{where}")
        if isinstance(error, MemoryError):
            return ChatTemplateError(f"the chat template ran out of memory{where}")
        return ChatTemplateError(f"chat template failed{where}: {type(error).__name__}: {_one_line(error)}")


def _template_line(template: jinja2.Template, tb: TracebackType | None) -> str:
    """ " at line N" of the template source where the error was raised, or ""."""
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {template.get_corresponding_lineno(lineno)}" if lineno is not None else ""


def default_template(bos_token: str = "", eos_token: str = "") -> ChatTemplate:
    """ChatML, the fallback llama.cpp uses for a model whose file carries no template."""
    return ChatTemplate(CHATML_SOURCE, bos_token=bos_token, eos_token=eos_token)
