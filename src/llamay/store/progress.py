"""Progress printer for long work: `Progress()(status, digest, completed, total)` (pulls pass a blob's
digest; other work None).

On a TTY it redraws one bar per status (amount, total, rate, ETA) on stderr; otherwise it prints a plain line
on each status change and at most every `interval` seconds while work flows. unit: "bytes" (pulls,
quantize), or a word counted plainly ("tokens", "checks", "runs")."""
import sys
import time
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    def __init__(self, stream: TextIO | None = None, interval: float = 5.0, tty: bool | None = None,
                 clock=time.monotonic, unit: str = "bytes"):
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval, self.clock = interval, clock
        self.status: str | None = None
        self.t0 = self.c0 = 0.0
        self.last = 0.0
        self.done_shown = False    # plain: the line at completed == total is printed once
        self.open_line = False     # TTY: a bar is drawn and not yet ended by a newline

    def __call__(self, status: str, digest: str | None = None, completed: int = 0, total: int = 0) -> None:
        now = self.clock()
        changed = status != self.status
        if changed:
            self._end_line()
            self.status, self.t0, self.c0, self.last, self.done_shown = status, now, completed, 0.0, False
        done = bool(total) and completed >= total
        if self.tty:
            self._draw(self._line(completed, total, now), changed)
        elif changed or (done and not self.done_shown) or (not done and now - self.last >= self.interval):
            self.stream.write(self._line(completed, total, now) + "\n")
            self.last, self.done_shown = now, done
        self.stream.flush()

    def close(self) -> None:
        """End a bar left on the terminal (call once the pull finished or failed)."""
        self._end_line()
        self.stream.flush()

    def _draw(self, line: str, changed: bool) -> None:
        self.stream.write(("" if changed else "\r") + line + "\x1b[K")
        self.open_line = True

    def _end_line(self) -> None:
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False

    def _line(self, completed: int, total: int, now: float) -> str:
        if not total:
            return self.status or ""
        parts = [f"{self.status}", f"{100 * completed // total:3d}%"]
        if self.tty:
            filled = BAR_WIDTH * completed // total
            parts.append("▕" + "█" * filled + " " * (BAR_WIDTH - filled) + "▏")
        amount = format_bytes if self.unit == "bytes" else (lambda n: f"{n:.0f}")
        parts.append(f"{amount(completed)}/{amount(total)}" + ("" if self.unit == "bytes" else f" {self.unit}"))
        rate = (completed - self.c0) / (now - self.t0) if now > self.t0 else 0.0
        if rate > 0:               # unknown until work was done over measurable time
            parts.append(f"{format_bytes(rate)}/s" if self.unit == "bytes" else f"{rate:.1f} {self.unit}/s")
            if completed < total:
                parts.append(format_duration((total - completed) / rate))
        return "  ".join(parts)


def format_bytes(n: float) -> str:
    """Decimal units: 512 B, 1.5 KB, 12 MB, 2.0 GB (one decimal below 10)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
