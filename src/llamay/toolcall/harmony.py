"""OpenAI's harmony format (gpt-oss): the output is messages, each a header and a body,
`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>`.
The analysis channel is reasoning; final, and commentary addressed to no one, are content; a message
addressed `to=functions.NAME` (in the header, before or after the channel) is a call of NAME with its body
as the JSON arguments. Headers are dropped. A marker cut across pieces is held back until it is whole."""
from __future__ import annotations

import re

from ..events import ToolCallDelta
from ..chat.reasoning import held_prefix
from .parser import new_call_id

MESSAGE, ENDS = "<|message|>", ("<|end|>", "<|call|>", "<|return|>", "<|start|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z0-9_]+)")
_RECIPIENT = re.compile(r"\bto=functions\.([A-Za-z0-9_.\-]+)")


def is_harmony(template_source: str) -> bool:
    return "<|channel|>" in (template_source or "") and MESSAGE in template_source


class HarmonyReader:
    """One choice's output text -> (content, reasoning, tool-call deltas); a call's one delta carries its
    id, name and whole arguments when its message ends."""

    def __init__(self):
        self.buf, self.header, self.kind, self.name, self.args = "", "", None, None, ""
        self.calls = 0

    def feed(self, text: str) -> tuple[str, str, list]:
        self.buf += text
        out, calls = ["", ""], []
        while self._step(out, calls, final=False):
            pass
        return out[0], out[1], calls

    def flush(self) -> tuple[str, str, list]:
        out, calls = ["", ""], []
        while self._step(out, calls, final=True):
            pass
        if self.kind is None and (self.header + self.buf).strip():
            out[0] += self.header + self.buf  # never a message: shown as it came
        elif self.kind == "call":
            self._call(calls)  # cut short (max_tokens): the arguments as far as they came
        self.buf = self.header = ""
        return out[0], out[1], calls

    def _step(self, out: list, calls: list, final: bool) -> bool:
        if not self.buf:
            return False
        if self.kind is None:  # in a header: up to <|message|>
            at = self.buf.find(MESSAGE)
            if at < 0:
                keep = 0 if final else held_prefix(self.buf, MESSAGE)
                self.header += self.buf[:len(self.buf) - keep]
                self.buf = self.buf[len(self.buf) - keep:]
                return False
            header, self.buf, self.header = self.header + self.buf[:at], self.buf[at + len(MESSAGE):], ""
            recipient, channel = _RECIPIENT.search(header), _CHANNEL.search(header)
            self.kind = ("call" if recipient else "reasoning" if channel and channel.group(1) == "analysis"
                         else "content")
            self.name, self.args = (recipient.group(1) if recipient else None), ""
            return True
        ends = [(self.buf.find(e), e) for e in ENDS if e in self.buf]
        at, end = min(ends) if ends else (-1, "")
        body = self.buf if at < 0 else self.buf[:at]
        keep = 0 if at >= 0 or final else max(held_prefix(self.buf, e) for e in ENDS)
        body = body[:len(body) - keep] if keep else body
        if self.kind == "call":
            self.args += body
        else:
            out[self.kind == "reasoning"] += body
        if at < 0:
            self.buf = self.buf[len(self.buf) - keep:] if keep else ""
            return False
        if self.kind == "call":
            self._call(calls)
        self.buf, self.kind = self.buf[at + (0 if end == "<|start|>" else len(end)):], None
        return True

    def _call(self, calls: list):
        calls.append(ToolCallDelta(self.calls, new_call_id(), self.name, self.args.strip()))
        self.calls += 1
        self.kind = None
