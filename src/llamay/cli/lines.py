"""The chat's input lines: on a terminal, readline's line editing and a history file ($LLAMAY_HOME/history);
otherwise (a pipe, a redirected stdout, no readline) plain lines, and no prompt shown off a terminal."""
from __future__ import annotations

import sys

from .. import env

HISTORY_LINES = 1000


class Lines:
    def __init__(self):
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty()  # input() uses readline only then
        self.readline, self.history = None, env.home() / "history"
        if not self.interactive:
            return
        try:
            import readline
        except ImportError:  # a Python built without it: input() still reads lines, without editing
            return
        self.readline = readline
        readline.set_history_length(HISTORY_LINES)
        try:
            readline.read_history_file(self.history)
        except OSError:  # none yet, or unreadable: start without
            pass

    def read(self, prompt: str) -> str:
        """One line without its newline; EOFError at the end (Ctrl-D), KeyboardInterrupt on Ctrl-C."""
        return input(prompt if self.interactive else "")

    def close(self):
        """Writes the history file (a failure to write it costs only the history)."""
        if self.readline is None:
            return
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.history)
        except OSError:
            pass
