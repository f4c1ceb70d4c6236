"""Stop strings over a text stream: text that might begin a stop string is held back until it is
known not to; text from a stop string on is never emitted."""
from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str] | None):
        self.stops = [s for s in (stops or []) if s]
        self.held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the stream

    def feed(self, text: str) -> str:
        """Returns the text that is safe to emit now."""
        if self.stopped:
            return ""
        buf = self.held + text
        hits = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        if hits:
            cut, self.matched = min(hits)
            self.held, self.stopped = "", True
            return buf[:cut]
        keep = max((k for s in self.stops for k in range(min(len(s) - 1, len(buf)), 0, -1)
                    if buf.endswith(s[:k])), default=0)
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep]

    def flush(self) -> str:
        held, self.held = self.held, ""
        return "" if self.stopped else held


def stop_list(stop: str | list[str] | None) -> list[str]:
    """The stop argument of the Python API (one string, several, or none) as a list."""
    return [stop] if isinstance(stop, str) else list(stop or [])
