"""Run one compile where it cannot take the process down: a fresh thread with a large stack (llguidance's
compiler recurses per rule / schema level), a time limit for the caller, and at most MAX_COMPILES such
threads at once. A native compile past its time cannot be stopped: it keeps its slot until it returns."""
from __future__ import annotations

import threading

from . import limits
from .errors import GrammarBusy, GrammarError

_SLOTS = threading.BoundedSemaphore(limits.MAX_COMPILES)
_STACK_LOCK = threading.Lock()  # threading.stack_size is process-wide: set, start, restore


def run_bounded(fn):
    """fn() on a COMPILE_STACK_BYTES thread; its result, or its exception re-raised. GrammarError when it
    runs past COMPILE_TIMEOUT_S; GrammarBusy when no slot frees within that time."""
    timeout = limits.COMPILE_TIMEOUT_S
    if not _SLOTS.acquire(timeout=timeout):
        raise GrammarBusy(f"the grammar compiler is busy: {limits.MAX_COMPILES} compiles are running "
                          f"(MAX_COMPILES); try again later")
    box: dict = {}
    try:
        thread = _start(lambda: _work(fn, box))
    except RuntimeError as e:  # no thread of COMPILE_STACK_BYTES now (memory limits)
        _SLOTS.release()
        raise GrammarBusy(f"no grammar compile thread could start: {e}") from None
    except BaseException:
        _SLOTS.release()
        raise
    thread.join(timeout)
    if thread.is_alive():
        raise GrammarError(f"compiling the grammar took longer than {timeout:g} s (COMPILE_TIMEOUT_S)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _work(fn, box: dict) -> None:
    try:
        box["value"] = fn()
    except BaseException as e:  # handed to the caller, whatever it is
        box["error"] = e
    finally:
        _SLOTS.release()


def _start(target) -> threading.Thread:
    thread = threading.Thread(target=target, name="llamay-grammar-compile", daemon=True)
    with _STACK_LOCK:
        previous = threading.stack_size(limits.COMPILE_STACK_BYTES)
        try:
            thread.start()
        finally:
            threading.stack_size(previous)
    return thread
