"""How many threads the kernels use: the default (physical cores) and a governor that lowers the count
while other work holds the cores. Results never depend on the count (threads split outputs, never a
reduction), so changing it between steps changes only the speed."""
from __future__ import annotations

import os
import statistics
from collections import deque

from .. import env

SLOW = 2.0          # SLOW_RUN steps in a row this many times the recent median start a probe:
SLOW_RUN = 2        #   a lasting slowdown (other work), not a one-off pause
FIRST_PROBE = 8         # the first probe: a machine busy from the start never looks slower than usual
PROBE_AT_FULL = 256     # steps between probes of the reduced count when nothing looks slow
PROBE_WHEN_REDUCED = 32  # steps between probes of the full count while reduced (has the other work gone?)
PROBE_STEPS = 6     # steps per probe, alternating the other count and the current one
PROBE_MAX_SIZE = 8  # a probe runs on steps of at most this many tokens (decode steps), all of one size: a
                    #   prompt's pass at the reduced count would cost its request seconds, and rarely repeats
PROBE_PATIENCE = 4 * PROBE_STEPS  # steps after which a probe not done (its size gone) is given up
HISTORY = 8         # recent step times kept per (step size, count)


def physical_cores() -> int:
    """Cores this process may run on, counting hyperthread siblings once (Linux sysfs; else all CPUs)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                cores.add(f.read().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))


def default_threads() -> int:
    """LLAMAY_THREADS, else the physical cores."""
    return env.threads() or physical_cores()


class Governor:
    """Chooses the thread count of each forward pass. It runs at `full` until steps are much slower than
    usual (or at step FIRST_PROBE, then every PROBE_AT_FULL steps; while reduced, every PROBE_WHEN_REDUCED),
    then probes:
    PROBE_STEPS steps alternating the other count (full // 2 when at full, full when reduced) and the
    current one, interleaved so both see the same machine, and keeps whichever had the lower median. A
    probe starts on a step of at most PROBE_MAX_SIZE tokens and runs on steps of that size only: the others
    (a prompt's pass) run at the current count meanwhile."""

    def __init__(self, adaptive: bool | None = None):
        self.adaptive = env.adapt_threads() if adaptive is None else adaptive
        self.reduced = False
        self._times: dict[tuple[int, int], deque] = {}
        self._steps = self._slow = 0
        self._probe: list[bool] = []  # reduced-or-not of each step still to run in the probe
        self._probe_size = self._probe_age = 0  # the size of the steps it runs on; steps since it started
        self._due = False  # a probe is wanted: it starts on the next step small enough
        self._probed: dict[tuple[int, bool], list[float]] = {}

    def pick(self, full: int, size: int = 1) -> int:
        """The count for the next step, of `size` tokens."""
        if not self.adaptive or full <= 1:
            return full
        return self._count(full, self._probe[0] if self._probe and size == self._probe_size else self.reduced)

    @staticmethod
    def _count(full: int, reduced: bool) -> int:
        return max(1, full // 2) if reduced else full

    def record(self, size: int, used: int, seconds: float, full: int):
        """One step of `size` tokens ran with `used` threads (what pick returned) in `seconds`."""
        if not self.adaptive or full <= 1:
            return
        times = self._times.setdefault((size, used), deque(maxlen=HISTORY))
        slow = len(times) >= 3 and seconds > SLOW * statistics.median(times)
        self._slow = self._slow + 1 if slow else 0
        times.append(seconds)
        self._steps += 1
        every = PROBE_WHEN_REDUCED if self.reduced else PROBE_AT_FULL
        if self._probe:
            self._probe_age += 1
            if size == self._probe_size:
                self._probed.setdefault((size, self._probe.pop(0)), []).append(seconds)
                if not self._probe:
                    self._decide(size)
            elif self._probe_age > PROBE_PATIENCE:
                self._probe = []
            return
        if self._slow >= SLOW_RUN or self._steps % every == 0 or self._steps == FIRST_PROBE:
            self._due, self._slow = True, 0
        if self._due and size <= PROBE_MAX_SIZE:
            self._due, self._probe_size, self._probe_age = False, size, 0
            self._probe = [not self.reduced, self.reduced] * (PROBE_STEPS // 2)
            self._probed = {}

    def _decide(self, size: int):
        now, other = self._probed.get((size, self.reduced)), self._probed.get((size, not self.reduced))
        if now and other and statistics.median(other) < statistics.median(now):
            self.reduced = not self.reduced
