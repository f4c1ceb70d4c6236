"""Background work (the prefault of memory, the cache tiers' writes) runs when the model is idle: on a
machine of few cores it takes a core, and a fault the memory-map lock, from the request beside it. Idle
means no request for IDLE_GRACE seconds, not only none at this instant: a client's next request mostly
follows its last within milliseconds (an agent's next turn, a regenerate, a benchmark), and a 19 MB state
record written in that gap slowed a regenerate of Qwen3.5-0.8B (its answer from memory: 1 ms of compute)
from 5-10 ms to 6-31 ms on 2 cores."""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

IDLE_POLL = 0.01  # seconds between looks at the model (each a wakeup of the waiting thread)
IDLE_GRACE = 0.05  # seconds without a request before background work goes on


def when_idle(idle_for: Callable[[], float], grace: float = IDLE_GRACE) -> Callable[[Callable[[], bool] | None], None]:
    """wait(done=None): returns once idle_for() (seconds since the model's last request; 0 while one runs)
    reaches grace, or once done() is true (work that must not wait for ever: a tier's write-behind under
    steady load, or one a flush waits for)."""
    def wait(done: Callable[[], bool] | None = None):
        while (left := grace - idle_for()) > 0 and not (done is not None and done()):
            time.sleep(min(left, IDLE_POLL))
    return wait


def background_priority():
    """The calling thread at the lowest CPU priority (Linux: nice is per thread): a tier's write that its
    wait let run beside a request (CACHE.write_wait) takes a core only when the request's threads leave it."""
    if sys.platform != "linux":  # elsewhere a thread's id is no process id to renice: the wait alone
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:
        pass
