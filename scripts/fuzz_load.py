"""Mutation fuzzer for model loading: a hostile but parseable GGUF file must load and run a forward pass,
or fail with ModelFileError or GGUFError; never crash, hang or raise anything else.

    python scripts/fuzz_load.py --cases 100000 --seed 1 [--model PATH] [--jobs 1] [--save DIR]
    python scripts/fuzz_load.py --edits CASES.json   # named edit lists -> JSON outcomes (the tests use it)

A case is a seeded list of edits (set/del a metadata key, reshape/retype/drop/rename/add a tensor) to a
base model: a tiny llama or bert (fuzz_gguf.py; a share of them redrawn with a random llama, qwen2, gemma3
or bert geometry), or --model. One case in ten has no edit and must load. Its bytes go to a tmpfs file
that a forked child loads and runs (llamay.load, a 3-token forward pass and 2 decode steps; or
open_embedder and embed), so a crash is a counted signal, not a dead fuzzer. The parent never runs a
kernel, so a child starts with none of the parent's kernel threads' state.
Case i of seed s is random.Random(f"{s}:{i}"), so `--seed s --case i` replays it alone."""
from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass

import numpy as np

from llamay import load
from llamay.engine.embed import open_embedder
from llamay.gguf import GGUFError, GGUFReader
from llamay.models import ModelFileError, UnsupportedModel
from llamay.models.checks import MATRIX, TABLE, TIED, VECTOR, allowed_types
from llamay.models.encoder_spec import is_encoder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fuzz_gguf import BASES, apply, case, from_file  # noqa: E402

for _role in (MATRIX, TABLE, TIED, VECTOR):  # probed once here, not in every child (no kernel runs)
    allowed_types(_role)

OUTCOMES = ("loaded", "ModelFileError", "GGUFError", "UnsupportedModel", "rejected", "foreign", "crash", "hang")
BAD = ("UnsupportedModel", "rejected", "foreign", "crash", "hang")  # rejected: an unedited file refused


# --- one load in a forked child --------------------------------------------------------------
def load_and_run(path: str) -> tuple[str, str]:
    """(outcome, detail) of loading path and running it once (in the child)."""
    try:
        if is_encoder(GGUFReader(path).metadata):
            e = open_embedder(path, threads=1)
            ids = [i % e.tokenizer.n_vocab for i in (2, 5, 3)][:e.n_ctx]
            out = e.rank("a b", ["c"]) if e.pooling == "rank" else e.embed([ids])
        else:
            llm = load(path, threads=1)
            ids = [i % llm.n_vocab for i in (1, 2, 3)][:llm.n_ctx]
            out = llm.logits(ids)  # a prefill of up to 3 tokens, then 1-token decode steps
            "".join(llm.generate(ids[:1], max_tokens=2, temperature=0.0))
        return "loaded", "finite" if np.isfinite(np.asarray(out, np.float64)).all() else "not finite"
    except ModelFileError as e:
        return "ModelFileError", str(e)
    except GGUFError as e:
        return "GGUFError", str(e)
    except UnsupportedModel as e:
        return "UnsupportedModel", str(e)
    except Exception as e:  # noqa: BLE001  (what the fuzzer is looking for)
        return "foreign", "".join(traceback.format_exception(e)[-3:])[-1500:]


def _child(path: str, w: int, mem_bytes: int):
    try:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        np.seterr(all="ignore")  # garbage weights overflow in numpy; only a crash or an exception counts
        result = load_and_run(path)
    except BaseException as e:  # noqa: BLE001  (MemoryError, SystemExit ...: still a foreign outcome)
        result = ("foreign", f"{type(e).__name__}: {e}"[:1500])
    os.write(w, json.dumps(result).encode())
    os._exit(0)


@dataclass
class Job:
    key: object
    pid: int
    fd: int
    path: str
    deadline: float
    out: bytes = b""


class Pool:
    """Up to `jobs` forked children at a time, each loading one file; a child that dies by a signal is a
    crash, one that outlives its deadline is killed and a hang."""

    def __init__(self, jobs: int, timeout: float, mem_bytes: int, tmp: str):
        self.jobs, self.timeout, self.mem, self.tmp = jobs, timeout, mem_bytes, tmp
        self.running: dict[int, Job] = {}

    def submit(self, key, data: bytes):
        path = os.path.join(self.tmp, f"case-{len(self.running)}-{os.getpid()}-{time.monotonic_ns()}.gguf")
        with open(path, "wb") as f:
            f.write(data)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _child(path, w, self.mem)
        os.close(w)
        self.running[r] = Job(key, pid, r, path, time.monotonic() + self.timeout)

    def full(self) -> bool:
        return len(self.running) >= self.jobs

    def wait(self):
        """Block until at least one child finished; yields its (key, outcome, detail)."""
        while self.running:
            wait = min(j.deadline for j in self.running.values()) - time.monotonic()
            ready, _, _ = select.select(list(self.running), [], [], max(0.0, wait))
            done = []
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    self.running[fd].out += chunk
                else:
                    done.append(fd)
            for fd, job in list(self.running.items()):
                if fd not in done and time.monotonic() > job.deadline:
                    os.kill(job.pid, signal.SIGKILL)
            if done:
                for fd in done:
                    yield self._finish(self.running.pop(fd))
                return

    def _finish(self, job: Job):
        os.close(job.fd)
        _, status = os.waitpid(job.pid, 0)
        os.unlink(job.path)
        if job.out:
            outcome, detail = json.loads(job.out)
            return job.key, outcome, detail
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and time.monotonic() > job.deadline:
            return job.key, "hang", f"no result after {self.timeout} s"
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return job.key, "crash", f"signal {signal.Signals(sig).name}" if sig else f"exit status {status}"


def run_all(items, pool: Pool):
    """items: iterable of (key, bytes) -> yields (key, outcome, detail) in completion order."""
    for key, data in items:
        if pool.full():
            yield from pool.wait()
        pool.submit(key, data)
    while pool.running:
        yield from pool.wait()


# --- command line ----------------------------------------------------------------------------
def _tmpdir() -> str:
    return tempfile.mkdtemp(prefix="fuzz-load-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)


def run_edits(path: str, pool: Pool) -> dict:
    """{name: {"base": "llama"|"bert"|a GGUF path, "edits": [...]}} from a JSON file -> {name: [outcome, detail]}."""
    with open(path) as f:
        cases = json.load(f)
    bases = {b: BASES[b]() if b in BASES else from_file(b) for b in {c["base"] for c in cases.values()}}
    items = ((name, apply(bases[c["base"]], c["edits"]).to_bytes()) for name, c in cases.items())
    return {name: [outcome, detail] for name, outcome, detail in run_all(items, pool)}


def fuzz(args, pool: Pool) -> Counter:
    bases = [from_file(args.model)] if args.model else args.base.split(",")
    indices = [args.case] if args.case is not None else range(args.cases)
    counts, t0, last = Counter(), time.monotonic(), time.monotonic()

    def items():
        for i in indices:
            name, edits, data = case(bases, args.seed, i, 0.0 if args.model else args.p_random)
            yield (i, name, edits, data), data

    for (i, name, edits, data), outcome, detail in run_all(items(), pool):
        if not edits and outcome != "loaded":
            outcome, detail = "rejected", f"{outcome}: {detail}"
        counts[outcome] += 1
        if outcome in BAD or args.case is not None:
            _report(args, (i, name, edits, data), outcome, detail)
        if time.monotonic() - last > args.progress:
            last = time.monotonic()
            print(f"[{last - t0:.0f} s] {sum(counts.values())} cases: {dict(counts)}", file=sys.stderr, flush=True)
    return counts


def _report(args, item, outcome: str, detail: str):
    i, name, edits, data = item
    print(f"{outcome}: seed {args.seed} case {i} (replay: --seed {args.seed} --case {i}), base {name}: "
          f"{json.dumps(edits)}\n    {detail.strip()}", file=sys.stderr, flush=True)
    if args.save and outcome in BAD:
        os.makedirs(args.save, exist_ok=True)
        stem = os.path.join(args.save, f"{outcome}-seed{args.seed}-case{i}")
        with open(stem + ".gguf", "wb") as f:
            f.write(data)
        with open(stem + ".json", "w") as f:
            json.dump({"seed": args.seed, "case": i, "base": name, "edits": edits, "outcome": outcome,
                       "detail": detail}, f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--case", type=int, help="replay one case of --seed")
    p.add_argument("--model", help="base GGUF file (default: the tiny models of fuzz_gguf.py)")
    p.add_argument("--base", default="llama", help="tiny bases, comma-separated: llama, bert")
    p.add_argument("--p-random", type=float, default=0.3, help="share of tiny bases of a random geometry")
    p.add_argument("--edits", help="JSON file of named edit lists: print their outcomes as JSON")
    p.add_argument("--jobs", type=int, default=1, help="children at a time")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    p.add_argument("--mem-gb", type=float, default=4.0, help="address-space limit of each child")
    p.add_argument("--save", default="fuzz-crashes", help="directory for files with a bad outcome")
    p.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON line")
    args = p.parse_args(argv)
    tmp = _tmpdir()
    pool = Pool(args.jobs, args.timeout, int(args.mem_gb * 2**30), tmp)
    try:
        if args.edits:
            print(json.dumps(run_edits(args.edits, pool)))
            return 0
        t0 = time.monotonic()
        counts = fuzz(args, pool)
    finally:
        os.rmdir(tmp)
    summary = {o: counts.get(o, 0) for o in OUTCOMES}
    print(json.dumps(summary) if args.json else
          f"{sum(counts.values())} cases, seed {args.seed}, {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{o} {n}" for o, n in summary.items()))
    return 1 if any(summary[o] for o in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
