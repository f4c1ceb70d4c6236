"""Reasoning split: text between <think> and </think> is reasoning, the rest content. By default (mode
'auto') only for models whose chat template uses the tags; a tag cut across pieces is held back until it
is whole or ruled out."""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"
MODES = ("auto", "deepseek", "none")  # llama-server's --reasoning-format: by the template, always, never


def held_prefix(buf: str, tag: str) -> int:
    """Length of the longest end of buf that could be the start of tag (held back until it is decided)."""
    return max((k for k in range(min(len(tag) - 1, len(buf)), 0, -1) if buf.endswith(tag[:k])), default=0)


def opened(prompt_tail: str) -> bool:
    """Whether a rendered prompt ends inside an open <think> (Qwen3.5's, Nemotron 3's templates open it for
    the model): the output then starts as reasoning."""
    return prompt_tail.rstrip().endswith(OPEN)


class ReasoningSplitter:
    def __init__(self, template_source: str, mode: str = "auto", thinking: bool = False):
        """mode: one of MODES; 'none' leaves the tags and the thoughts in the content. thinking: the prompt
        opened the reasoning (opened()): the output starts inside it."""
        if mode not in MODES:
            raise ValueError(f"reasoning format must be one of {', '.join(MODES)}, got {mode!r}")
        self.enabled = mode == "deepseek" or mode == "auto" and OPEN in (template_source or "")
        self.thinking = self.enabled and thinking
        self.held = ""

    def feed(self, text: str) -> tuple[str, str]:
        """-> (content, reasoning) safe to emit now."""
        if not self.enabled:
            return text, ""
        buf, out = self.held + text, (["", ""])
        while True:
            tag = CLOSE if self.thinking else OPEN
            at = buf.find(tag)
            if at < 0:
                break
            out[self.thinking] += buf[:at]
            buf, self.thinking = buf[at + len(tag):], not self.thinking
        keep = held_prefix(buf, CLOSE if self.thinking else OPEN)
        self.held = buf[len(buf) - keep:]
        out[self.thinking] += buf[:len(buf) - keep]
        return out[0], out[1]

    def flush(self) -> tuple[str, str]:
        held, self.held = self.held, ""
        return ("", held) if self.thinking else (held, "")
