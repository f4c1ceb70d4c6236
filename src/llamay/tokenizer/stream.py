"""Incremental detokenizer: never emits half a UTF-8 character."""
from __future__ import annotations

import codecs


class IncrementalDecoder:
    """Feeds token pieces through an incremental UTF-8 decoder that holds back incomplete sequences.

    Invariant: the concatenation of everything `add` and `flush` return equals tok.decode(ids).
    """

    def __init__(self, tok):
        self.tok = tok
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def add(self, tid: int) -> str:
        return self._utf8.decode(self.tok.piece(tid))

    def flush(self) -> str:
        """Ends the stream: a dangling partial sequence becomes U+FFFD, as decode() renders it."""
        out = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return out
