"""`llamay verify`: the determinism invariants, checked on a file the user owns, plus the effect of each
quantized KV type on next-token distributions (total-variation distance against f32 KV)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred "
        "and twelve steps. At the top he wiped the salt from the great lens, lit the lamp, and wrote three "
        "lines in the logbook: the wind, the sea, and the ships he had seen. Nobody read the logbook, but "
        "he wrote it carefully all the same, because a record kept for no one is still a record.")
TV_LIMIT = 0.05
KV_RULE = f"the mean TV is judged, not the max: above {TV_LIMIT:.0%}, use --kv f32"  # docs/CLI.md says it too


@dataclass
class Check:
    name: str
    ok: bool
    max_abs_diff: float
    note: str = ""
    mean_tv: float | None = None  # a KV type's check: the mean next-token TV against f32 KV


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0


def _equal(name: str, got: np.ndarray, want: np.ndarray, note: str = "") -> Check:
    return Check(name, bool(np.array_equal(got, want)), _diff(got, want), note)


Step = Callable[[int, int], None]  # progress(checks done, checks in all)
KV_CHECKED = ("f16", "q8", "vq8")


def _other_threads(n: int) -> list[int]:
    return sorted({1, 2, 3} - {n})


def n_checks(llm) -> int:
    """How many checks run_verify makes on this model and CPU (for a progress bar)."""
    from ..kernels import _lib
    return 4 + len(_other_threads(llm.decoder.nthreads)) + len(_lib.available()) - 1 + len(KV_CHECKED)


def determinism_checks(llm, ids: list[int], progress: Step | None = None) -> list[Check]:
    from ..kernels import _lib
    checks: list[Check] = []
    total = n_checks(llm)

    def add(check: Check):
        checks.append(check)
        if progress:
            progress(len(checks), total)

    k = len(ids) // 2
    llm.reset()
    batched = llm.logits(ids)
    cold = batched[-1]
    llm.reset()
    steps = np.stack([llm.eval_last(ids[:i]) for i in range(1, len(ids) + 1)])
    add(_equal("prefill == token-by-token decode", steps, batched, f"{len(ids)} positions"))
    llm.reset()
    llm.eval_last(ids[:k])
    hit = llm.eval_last(ids)
    add(_equal("prefix-cache hit == cold prefill", hit, cold, f"{llm.stats.cached_tokens} of {len(ids)} tokens reused"))
    base = llm.create_context(ids[:k])
    kids = base.fork(3)
    forked = [c.extend(ids[k:]) for c in kids]
    add(_equal("fork continues == fresh prefill", np.stack(forked), np.stack([cold] * 3), "3 branches"))
    add(_restore_check(llm, base, ids[k:], cold))
    for c in kids + [base]:
        c.delete(cache=False)
    n = llm.decoder.nthreads
    for t in _other_threads(n):
        add(_with(llm, f"{t} thread{'s' * (t > 1)} == {n}", batched, lambda t=t: _threads(llm, t, ids)))
    here, skipped = _lib.current(), _lib.skipped()
    note = f"not on this CPU: {', '.join(skipped)}" if skipped else "every kernel path compared"
    for path in _lib.available():
        if path != here:
            check = _with(llm, f"{path} kernels == {here} kernels", batched, lambda p=path: _on_path(llm, _lib, p, ids))
            check.note = note
            add(check)
    return checks


def _restore_check(llm, base, rest: list[int], cold: np.ndarray) -> Check:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "base.llamayctx")
        base.save(path)
        restored = llm.restore_context(path)
        got = restored.extend(rest)
        restored.delete(cache=False)
    return _equal("restored snapshot continues == original", got, cold)


def _with(llm, name: str, want: np.ndarray, run: Callable[[], np.ndarray]) -> Check:
    llm.reset()
    return _equal(name, run(), want)


def _threads(llm, n: int, ids):
    old, llm.decoder.nthreads = llm.decoder.nthreads, n
    try:
        return llm.logits(ids)
    finally:
        llm.decoder.nthreads = old


def _on_path(llm, lib, path: str, ids):
    with lib.using(path):
        return llm.logits(ids)


def total_variation(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """Per-position total-variation distance between the softmax distributions of two logit rows."""
    def softmax(z):
        z = z.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(softmax(p_logits) - softmax(q_logits)).sum(axis=1)


def kv_type_checks(path: str, threads: int | None, ids: list[int], progress: Step | None = None) -> list[Check]:
    from .. import load
    ref = load(path, threads=threads, n_ctx=len(ids) + 8, kv="f32").logits(ids)
    out: list[Check] = []
    for kv in KV_CHECKED:
        out.append(_kv_check(path, threads, ids, kv, ref))
        if progress:
            progress(len(out), len(KV_CHECKED))
    return out


def _kv_check(path: str, threads: int | None, ids: list[int], kv: str, ref: np.ndarray) -> Check:
    from .. import load
    name = f"KV {kv}: next-token TV vs f32"
    try:
        got = load(path, threads=threads, n_ctx=len(ids) + 8, kv=kv).logits(ids)
    except ValueError as e:  # e.g. a head_dim q8 cannot hold
        return Check(name, True, 0.0, f"not available: {e}")
    tv = total_variation(ref, got)
    ok = tv.mean() <= TV_LIMIT
    note = f"mean TV {tv.mean():.2%} (judged), max {tv.max():.2%}" + ("" if ok else "; use --kv f32")
    return Check(name, ok, _diff(got, ref), note, float(tv.mean()))


def kv_advice(checks: list[Check]) -> str:
    """verify's last line: which KV types suit this model, by KV_RULE ('' when none was checked)."""
    kv = [(c.name.split(":")[0].removeprefix("KV "), c) for c in checks if c.mean_tv is not None]
    fine, bad = [k for k, c in kv if c.ok], [k for k, c in kv if not c.ok]
    if not kv:
        return ""
    if not bad:
        return f"KV types: {', '.join(fine)} fine on this model ({KV_RULE})"
    return (f"KV types: {', '.join(bad)} above {TV_LIMIT:.0%} mean TV: use --kv f32"
            + (f" (or {', '.join(fine)}, within it)" if fine else ""))


def run_verify(path: str, threads: int | None = None, n_tokens: int = 48, progress: Step | None = None) -> list[Check]:
    from .. import load
    llm = load(path, threads=threads, n_ctx=512)
    text_ids = llm.tokenize(TEXT)[:max(1, llm.n_ctx - 8)]  # a model with a shorter context checks less of it
    checks = determinism_checks(llm, text_ids[:n_tokens], progress)
    done, total = len(checks), n_checks(llm)
    step = (lambda i, _n: progress(done + i, total)) if progress else None
    return checks + kv_type_checks(path, threads, text_ids, step)


def format_table(checks: list[Check]) -> str:
    w = max(len(c.name) for c in checks)
    lines = [f"{'check':<{w}}  result  max abs diff  note"]
    for c in checks:
        lines.append(f"{c.name:<{w}}  {'ok' if c.ok else 'FAIL':<6}  {c.max_abs_diff:<12.6g}  {c.note}")
    return "\n".join(lines)
