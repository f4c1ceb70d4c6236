"""Streaming tool-call parser: model output text in pieces -> content text and ToolCallDelta events.

Text outside call regions is content. Inside one, a call's name is reported as soon as its head is read and
its arguments as fragments while they stream (a non-JSON syntax, Gemma 4's, XML blocks or keyword
arguments: one fragment, converted to JSON, when the arguments end). Structure is read with partial regex matches, so a piece may end anywhere. Text that does
not follow the format (possible only without a grammar) is given back as content."""
from __future__ import annotations

import json
import secrets
import string

import regex

from ..chat.reasoning import held_prefix
from ..events import ToolCallDelta
from .formats import GENERIC, CallFormat
from .gemma import args_to_json
from .jsonscan import StringDecoder, ValueEnd
from .pythonic import KwargsEnd, kwargs_to_json
from .xmlcall import ParamsEnd, params_to_json

_ALNUM = string.ascii_letters + string.digits


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def _flexible(literal: str) -> str:
    """A literal as a regex where whitespace may vary (templates indent calls; grammars do not)."""
    parts = [regex.escape(ch) for ch in literal if not ch.isspace()]
    return r"\s*" + r"\s*".join(parts) if parts else ""


class CallParser:
    def __init__(self, fmt: CallFormat):
        self.fmt = fmt
        self.state = "start" if fmt is GENERIC else "text"
        self.buf = ""
        self.region = ""  # raw text of the current region not yet attributed to a call
        self.calls = 0
        self.pending_space = ""  # whitespace after a call: shown only if more content follows
        self.scanner = None
        self.name = None  # the current call's function
        self.schemas = dict(fmt.schemas)
        self._re_open = regex.compile(_flexible(fmt.open), regex.S)
        self._re_head = regex.compile(fmt.head_re, regex.S)
        self._re_tail = regex.compile(fmt.tail_re, regex.S)
        self._re_sep = regex.compile(fmt.sep_re, regex.S)
        self._re_close = regex.compile(fmt.close_re, regex.S) if fmt.close_re else None
        self._trigger_in_head = bool(fmt.trigger) and fmt.head.startswith(fmt.trigger)

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self.buf += text
        content, calls = [], []
        while self.buf and self._step(content, calls):
            pass
        return self._content(content), calls

    def end(self) -> tuple[str, list[ToolCallDelta]]:
        content, calls = [], []
        while self.buf and self._step(content, calls, final=True):
            pass
        if self.state in ("open", "head", "start") or self.buf:
            content.append(self.region + self.buf)
        self.buf = self.region = ""
        text = self._content(content)
        return (text if text.strip() or not self.calls else ""), calls

    # -- states: each returns True when it consumed something (call again), False to wait for more ------

    def _step(self, content: list, calls: list, final: bool = False) -> bool:
        return getattr(self, "_" + self.state)(content, calls, final)

    def _text(self, content, calls, final) -> bool:
        trigger = self.fmt.trigger
        at = self.buf.find(trigger) if trigger else -1
        if at < 0:
            keep = 0 if final or not trigger else held_prefix(self.buf, trigger)
            content.append(self.buf[:len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep:]
            return False
        content.append(self.buf[:at])
        start = at if self._trigger_in_head else at + len(trigger)
        self.region, self.buf = self.buf[at:start], self.buf[start:]
        self.state = "head" if self._trigger_in_head else "open"
        return True

    def _start(self, content, calls, final) -> bool:  # generic: {"tool_calls": [...]} or {"response": "..."}
        for pattern, state in ((r'\s*\{\s*"response"\s*:\s*"', "response"),
                               (r'\s*\{\s*"tool_calls"\s*:\s*\[', "head")):
            m = regex.match(pattern, self.buf, partial=True)
            if m and not m.partial:
                self.region, self.buf, self.state = self.buf[:m.end()], self.buf[m.end():], state
                self.scanner = StringDecoder() if state == "response" else None
                return True
            if m and not final:
                return False
        self.state = "text"
        return True

    def _response(self, content, calls, final) -> bool:
        text, used = self.scanner.feed(self.buf)
        content.append(text)
        self.buf = self.buf[used:]
        if not self.scanner.done:
            self.region = ""
            return False
        self.region, self.state = "", "response_end"
        return True

    def _response_end(self, content, calls, final) -> bool:
        return self._expect(content, regex.compile(r"\s*\}"), "text", final)

    def _open(self, content, calls, final) -> bool:
        return self._expect(content, self._re_open, "head", final) if self._re_open.pattern else self._go("head")

    def _head(self, content, calls, final) -> bool:
        m = self._re_head.match(self.buf, partial=True)
        if m is None or (m.partial and final):
            return self._mismatch(content, final)
        if m.partial:
            return False
        name = json.loads('"' + m.group(1) + '"') if self.fmt.quoted_name else m.group(1)
        self.region, self.buf = "", self.buf[m.end():]
        calls.append(ToolCallDelta(self.calls, new_call_id(), name, ""))
        self.calls += 1
        self.name = name
        self.scanner = _ENDS[self.fmt.args]()
        self.args_shown = False
        self.state = "args"
        return True

    def _args(self, content, calls, final) -> bool:
        n = self.scanner.feed(self.buf)
        fragment, self.buf = self.buf[:n], self.buf[n:]
        if final and not self.scanner.done:
            self.scanner.finish()
        if self.fmt.args != "json":  # one fragment, converted, once the arguments end
            if self.scanner.done:
                calls.append(ToolCallDelta(self.calls - 1, arguments=self._converted(self.scanner.text)))
        else:
            fragment = fragment if self.args_shown else fragment.lstrip()  # whitespace before the value
            if fragment:
                calls.append(ToolCallDelta(self.calls - 1, arguments=fragment))
                self.args_shown = True
        if not self.scanner.done:
            return False
        self.state = "tail"
        return True

    def _tail(self, content, calls, final) -> bool:
        if not self._re_tail.pattern:
            return self._go("after_call")
        return self._expect(content, self._re_tail, "after_call", final)

    def _after_call(self, content, calls, final) -> bool:
        if self.fmt.sep:
            m = self._re_sep.match(self.buf, partial=True)
            if m and not m.partial and m.end() > 0:
                return self._consume(m, "head")
            closing = self._re_close is not None and self._re_close.match(self.buf, partial=True)
            if m and m.partial and not final and not closing:  # the start of a separator: wait for the rest
                return False
        if self._re_close is None:
            return self._go("text" if self.fmt.trigger else "done")
        return self._expect(content, self._re_close, "text" if self.fmt.trigger else "done", final)

    def _done(self, content, calls, final) -> bool:
        content.append(self.buf)
        self.buf = ""
        return False

    def _converted(self, text: str) -> str:
        """Non-JSON arguments as JSON object text; "{}" for arguments that cannot be read (possible only
        without the grammar)."""
        try:
            if self.fmt.args == "xml":
                args = params_to_json(text, self.schemas.get(self.name))
            else:
                args = (args_to_json if self.fmt.args == "gemma" else kwargs_to_json)(text)
        except ValueError:
            return "{}"
        return json.dumps(args, ensure_ascii=False)

    # -- helpers ------------------------------------------------------------------------------------

    def _expect(self, content: list, pattern: regex.Pattern, then: str, final: bool) -> bool:
        m = pattern.match(self.buf, partial=True)
        if m is None or (m.partial and final):
            return self._mismatch(content, final)
        if m.partial:
            return False
        return self._consume(m, then)

    def _consume(self, m, then: str) -> bool:
        self.region += self.buf[:m.end()]
        self.buf = self.buf[m.end():]
        return self._go(then)

    def _go(self, state: str) -> bool:
        if state in ("text", "done"):
            self.region = ""
        self.state = state
        return True

    def _mismatch(self, content: list, final: bool) -> bool:
        """Not the format after all: what was held as structure is content. A region still open when the
        output ends (max_tokens) after calls were made is a cut-off call: dropped."""
        if final and self.calls:
            self.buf = self.region = ""
            return False
        self.buf = self.region + self.buf
        self.region = ""
        self.state = "text" if self.fmt.trigger else "done"
        if self.fmt.trigger and self.buf.startswith(self.fmt.trigger):
            content.append(self.fmt.trigger)  # not this trigger again
            self.buf = self.buf[len(self.fmt.trigger):]
        return True

    def _content(self, parts: list[str]) -> str:
        text = self.pending_space + "".join(parts)
        self.pending_space = ""
        if self.calls and not text.strip():
            self.pending_space = text
            return ""
        return text


class _GemmaEnd:
    """The end of a Gemma 4 argument object: braces balanced outside <|"|>...<|"|> strings."""
    QUOTE = '<|"|>'

    def __init__(self):
        self.text, self.done = "", False

    def feed(self, text: str) -> int:
        start = len(self.text)
        self.text += text
        depth, i, in_str = 0, 0, False
        while i < len(self.text):
            if self.text.startswith(self.QUOTE, i):
                in_str, i = not in_str, i + len(self.QUOTE)
                continue
            if not in_str and self.text[i] in "{[":
                depth += 1
            elif not in_str and self.text[i] in "}]":
                depth -= 1
                if depth == 0:
                    self.done = True
                    used = i + 1 - start
                    self.text = self.text[:i + 1]
                    return used
            i += 1
        return len(text)

    def finish(self):
        pass


_ENDS = {"json": ValueEnd, "gemma": _GemmaEnd, "xml": ParamsEnd, "python": KwargsEnd}  # where arguments end
