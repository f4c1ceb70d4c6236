"""Tokenizer throughput (MB/s) on 1 MB of text, and build time, for SmolLM2 (BPE) and Gemma 3 (SPM).

Text: the Python standard library's own sources (sorted, concatenated to 1 MB): code, prose and
varied identifiers, so the word cache is exercised realistically rather than on a repeated string.
"cold" encodes with a freshly built tokenizer (empty word cache), "warm" encodes the same text again.
Each figure is the best of --repeat runs, as wall-clock and as CPU time of this process (the CPU
figure is the steadier one on a shared machine).
Usage: python bench/tokenizer_speed.py [--mb 1.0] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer
from models import gemma_path, smollm_path

MODELS = {
    "smollm2 (BPE, smollm)": smollm_path(),
    "gemma3 (SPM, 262k)": gemma_path(),
}


def corpus(n_bytes: int) -> str:
    parts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        data = path.read_text(encoding="utf-8", errors="replace")
        parts.append(data)
        size += len(data.encode())
        if size >= n_bytes:
            break
    return "".join(parts).encode()[:n_bytes].decode("utf-8", "ignore")


def timed(fn):
    """(result, wall seconds, CPU seconds) of fn()."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def run_once(meta: dict, text: str) -> tuple[int, list[tuple[float, float]]]:
    """Token count and (wall, cpu) for build, cold encode, warm encode."""
    tok, *t_build = timed(lambda: Tokenizer.from_gguf(meta))
    ids, *t_cold = timed(lambda: tok.encode(text, add_special=False))
    _, *t_warm = timed(lambda: tok.encode(text, add_special=False))
    return len(ids), [tuple(t_build), tuple(t_cold), tuple(t_warm)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    text = corpus(int(args.mb * 1e6))
    mb = len(text.encode()) / 1e6
    for name, path in MODELS.items():
        meta = GGUFReader(path).metadata
        runs = [run_once(meta, text) for _ in range(args.repeat)]
        n_tokens = runs[0][0]
        (bw, bc), (cw, cc), (ww, wc) = [tuple(map(min, zip(*col))) for col in zip(*(r[1] for r in runs))]
        print(f"{name}: {mb:.2f} MB -> {n_tokens} tokens; build {bw * 1e3:.0f} ms (cpu {bc * 1e3:.0f}); "
              f"cold {mb / cw:.2f} MB/s (cpu {mb / cc:.2f}); warm {mb / ww:.2f} MB/s (cpu {mb / wc:.2f})")


if __name__ == "__main__":
    main()
