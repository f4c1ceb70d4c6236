"""The thread count: the physical-core default, the governor that runs fewer threads while other work
holds the cores, and output that is the same whichever count it picks."""
import numpy as np
import pytest

import llamay
from llamay.kernels import threads
from llamay.kernels.threads import Governor


def test_physical_cores_counts_sibling_sets(monkeypatch, tmp_path):
    lists = {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}  # 2 cores with 2 hyperthreads each
    real_open = open

    def fake_open(path, *a, **k):
        if "thread_siblings_list" in str(path):
            cpu = int(str(path).split("/cpu")[-1].split("/")[0])
            f = tmp_path / f"s{cpu}"
            f.write_text(lists[cpu] + "\n")
            return real_open(f, *a, **k)
        return real_open(path, *a, **k)

    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr("builtins.open", fake_open)
    assert threads.physical_cores() == 2


def test_default_is_env_then_physical_cores(monkeypatch):
    monkeypatch.setenv("LLAMAY_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.delenv("LLAMAY_THREADS")
    assert threads.default_threads() == threads.physical_cores()


def run_steps(gov: Governor, cost, n: int, full: int = 4) -> list[int]:
    """n decode steps of one token; cost(count) -> seconds. Returns the count of each step."""
    used = []
    for _ in range(n):
        c = gov.pick(full)
        gov.record(1, c, cost(c), full)
        used.append(c)
    return used


def test_governor_lowers_the_count_when_full_is_slow_and_returns_when_it_is_not():
    gov = Governor(adaptive=True)
    quiet = run_steps(gov, lambda c: 1.0 / c, 20)  # quiet: the first probe finds full fastest
    assert quiet[:8] == [4] * 8 and quiet[8:14] == [2, 4] * 3 and quiet[14:] == [4] * 6
    busy = {4: 1.0, 2: 0.3}  # another process took cores: 4 threads wait on descheduled ones
    used = run_steps(gov, busy.get, 10)  # 2 slow steps, a probe of 6, then reduced
    assert used[:2] == [4, 4] and used[2:8] == [2, 4] * 3 and used[8:] == [2, 2] and gov.reduced
    used = run_steps(gov, lambda c: 1.0 / c, 3 * threads.PROBE_WHEN_REDUCED)  # quiet again: a probe restores full
    assert used[-1] == 4 and not gov.reduced


def test_governor_ignores_a_one_off_pause_and_keeps_full_when_the_probe_is_slower():
    gov = Governor(adaptive=True)
    gov._steps = threads.FIRST_PROBE  # past the first probe
    costs = iter([1.0] * 5 + [5.0] + [1.0] * 5)  # one pause: no probe
    assert run_steps(gov, lambda c: next(costs), 11) == [4] * 11
    costs = iter([5.0, 5.0] + [2.0, 1.0] * 3 + [1.0] * 10)  # a lasting slowdown, but 2 threads are worse
    used = run_steps(gov, lambda c: next(costs), 18)
    assert used[:2] == [4, 4] and used[2:8] == [2, 4] * 3 and used[8:] == [4] * 10 and not gov.reduced


def test_governor_finds_a_machine_busy_from_the_start():
    gov = Governor(adaptive=True)
    used = run_steps(gov, {4: 1.0, 2: 0.3}.get, 16)  # never slower than its own median: the first probe
    assert used[8:14] == [2, 4] * 3 and used[14:] == [2, 2] and gov.reduced


def step(gov: Governor, size: int, cost, full: int = 4) -> int:
    c = gov.pick(full, size)
    gov.record(size, c, cost(c), full)
    return c


def test_a_prompt_pass_runs_at_the_current_count_while_decode_steps_probe():
    gov = Governor(adaptive=True)
    cost = lambda c: 1.0 / c
    used = [step(gov, 1, cost) for _ in range(threads.FIRST_PROBE)]  # the probe starts after step 8
    used += [step(gov, 512, cost)]  # a prompt arrives: full, the probe waits
    used += [step(gov, 1, cost) for _ in range(threads.PROBE_STEPS + 2)]
    assert used == [4] * 9 + [2, 4] * 3 + [4, 4] and not gov.reduced
    gov = Governor(adaptive=True)
    gov._steps = threads.FIRST_PROBE - 1
    assert step(gov, 512, cost) == 4  # the probe falls due on a prompt's pass: it starts on the next decode step
    assert [step(gov, 1, cost) for _ in range(threads.PROBE_STEPS + 1)] == [4] + [2, 4] * 3


def test_a_probe_whose_step_size_is_gone_is_given_up():
    gov = Governor(adaptive=True)
    gov._steps = threads.FIRST_PROBE - 1
    step(gov, 2, lambda c: 1.0)  # two sequences decoding: the probe runs on steps of 2
    assert step(gov, 2, lambda c: 1.0) == 2  # its first step, reduced
    used = [step(gov, 1, lambda c: 1.0) for _ in range(threads.PROBE_PATIENCE + 2)]  # one sequence left
    assert used == [4] * len(used) and not gov._probe


def test_governor_off_or_one_thread_never_changes_the_count():
    assert run_steps(Governor(adaptive=False), {4: 9.0, 2: 0.1}.get, 80) == [4] * 80
    assert run_steps(Governor(adaptive=True), lambda c: 1.0, 80, full=1) == [1] * 80


@pytest.mark.model
def test_decode_is_identical_whatever_count_the_governor_picks(smollm_path):
    ids = list(range(1, 9))
    llm = llamay.load(smollm_path, threads=3, n_ctx=64)
    llm.decoder.governor.adaptive = False
    want = np.stack([llm.eval_last(ids[:i]) for i in range(1, len(ids) + 1)])
    llm.reset()
    counts = iter([3, 1, 2, 1, 3, 2, 1, 1])
    llm.decoder.governor.pick = lambda full, size=1: next(counts)
    got = np.stack([llm.eval_last(ids[:i]) for i in range(1, len(ids) + 1)])
    assert np.array_equal(got, want)
