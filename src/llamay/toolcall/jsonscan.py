"""Incremental JSON scanning for streamed tool calls: where does a JSON value end, and the decoded text of a
JSON string so far. Both take text in pieces of any size (a piece may cut an escape or a token in two)."""
from __future__ import annotations

import json

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class ValueEnd:
    """Finds the end of one JSON value (object, array, string or scalar) fed in pieces.

    feed(text) -> how many characters of text belong to the value (all of them while it is open);
    `done` becomes True once it is complete. A scalar (number, true, ...) is complete only when a character
    after it arrives (that character is not consumed), or at finish()."""

    def __init__(self):
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.started = False
        self.scalar = False
        self.done = False

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            if self.done:
                return i
            if not self.started:
                if ch.isspace():
                    continue
                self.started = True
                self.scalar = ch not in '{["'
            if self.scalar:
                if ch in ",}]" or ch.isspace():
                    self.done = True
                    return i
                continue
            self._step(ch)
            if self.done:
                return i + 1
        return len(text)

    def finish(self) -> None:
        if self.scalar:
            self.done = True

    def _step(self, ch: str) -> None:
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
                self.done = self.depth == 0
            return
        if ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            self.done = self.depth == 0


class StringDecoder:
    """The characters of a JSON string body (after its opening quote) decoded as they arrive.

    feed(text) -> (decoded text safe to show, characters of text consumed); the closing quote is consumed
    and sets `done`. An escape cut across pieces is held until whole; a \\uXXXX high surrogate waits for
    its pair."""

    def __init__(self):
        self.held = ""
        self.done = False

    def feed(self, text: str) -> tuple[str, int]:
        out, buf, used = [], self.held + text, 0
        base = len(self.held)
        i = 0
        while i < len(buf):
            ch = buf[i]
            if ch == '"':
                self.done = True
                i += 1
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            n = _escape_length(buf, i)
            if n is None:  # incomplete: hold the rest
                break
            out.append(json.loads('"' + buf[i:i + n] + '"') if buf[i + 1] in "u" else _ESCAPES.get(buf[i + 1], buf[i + 1]))
            i += n
        self.held = "" if self.done else buf[i:]
        used = len(text) if not self.done else i - base
        return "".join(out), used


def _escape_length(buf: str, i: int) -> int | None:
    """Length of the escape at buf[i] ('\\'), or None if it is not complete yet."""
    if i + 1 >= len(buf):
        return None
    if buf[i + 1] != "u":
        return 2
    if i + 6 > len(buf):
        return None
    if 0xD800 <= int(buf[i + 2:i + 6], 16) < 0xDC00:  # a high surrogate: its low half follows as \uXXXX
        return 12 if i + 12 <= len(buf) else None
    return 6
