"""A mixture-of-experts model against a dense one that reads the same weight bytes per token: decode tok/s,
interleaved, medians and the ratio (target: MoE within 15% of dense). Both files are made here with random
Q8_0 weights: qwen3moe with E experts of F values, k per token, and qwen3 with an FFN of k * F (same
attention, same vocabulary), so a decode step reads the same bytes apart from the router's d x E.
usage: python bench/moe.py [--threads 2] [--reps 5] [--experts 32] [--used 4] [--llama-bench PATH]"""
import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

import llamay  # noqa: E402
from llamay.gguf import GGUFWriter  # noqa: E402
from llamay.measure.bench import time_decode  # noqa: E402

D, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB, N_TG = 1024, 8, 16, 4, 64, 4096, 128
rng = np.random.default_rng(0)


def q8(m: int, k: int) -> np.ndarray:
    """m rows of k values as random Q8_0 blocks (f16 scale, 32 int8)."""
    raw = rng.integers(-127, 128, (m, k // 32, 34), dtype=np.int8).view(np.uint8)
    raw[..., :2] = np.full((m, k // 32, 1), 0.002, np.float16).view(np.uint8)
    return raw.reshape(-1)


def write(path: Path, arch: str, n_ff: int, n_expert: int = 0, used: int = 0):
    w = GGUFWriter()
    w.add("general.architecture", arch)
    for key, value in (("context_length", 2048), ("embedding_length", D), ("block_count", LAYERS),
                       ("feed_forward_length", n_ff), ("attention.head_count", HEADS),
                       ("attention.head_count_kv", KV_HEADS), ("attention.key_length", HEAD_DIM),
                       ("attention.value_length", HEAD_DIM)):
        w.add(f"{arch}.{key}", value, vtype=4)
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, vtype=6)
    w.add(f"{arch}.rope.freq_base", 1e6, vtype=6)
    if n_expert:
        w.add(f"{arch}.expert_count", n_expert, vtype=4)
        w.add(f"{arch}.expert_used_count", used, vtype=4)
        w.add(f"{arch}.expert_feed_forward_length", n_ff, vtype=4)
    pairs = [(chr(97 + i % 26), chr(97 + i // 26)) for i in range(26 * 26)]  # byte-level BPE: bytes, letter pairs
    tokens = [chr(b) if 33 <= b < 127 else chr(0x100 + b) for b in range(256)] + [a + b for a, b in pairs]
    tokens += [f"<unused{i}>" for i in range(VOCAB - 1 - len(tokens))] + ["<|endoftext|>"]
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.pre", "default")
    w.add("tokenizer.ggml.tokens", tokens)
    w.add("tokenizer.ggml.token_type", np.array([1] * (VOCAB - 1) + [3], np.int32))
    w.add("tokenizer.ggml.merges", [f"{a} {b}" for a, b in pairs])
    w.add("tokenizer.ggml.eos_token_id", VOCAB - 1, vtype=4)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    w.add_tensor("token_embd.weight", q8(VOCAB, D), "Q8_0", (D, VOCAB))
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    for i in range(LAYERS):
        b = f"blk.{i}."
        for name, rows, cols in (("attn_q", q, D), ("attn_k", kv, D), ("attn_v", kv, D), ("attn_output", D, q)):
            w.add_tensor(b + name + ".weight", q8(rows, cols), "Q8_0", (cols, rows))
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(b + name + ".weight", np.ones(D, np.float32))
        for name in ("attn_q_norm", "attn_k_norm"):
            w.add_tensor(b + name + ".weight", np.ones(HEAD_DIM, np.float32))
        if n_expert:
            w.add_tensor(b + "ffn_gate_inp.weight", rng.standard_normal((n_expert, D)).astype(np.float32))
            for name, rows, cols in (("ffn_gate_exps", n_ff, D), ("ffn_up_exps", n_ff, D), ("ffn_down_exps", D, n_ff)):
                w.add_tensor(b + name + ".weight", q8(n_expert * rows, cols), "Q8_0", (cols, rows, n_expert))
        else:
            for name, rows, cols in (("ffn_gate", n_ff, D), ("ffn_up", n_ff, D), ("ffn_down", D, n_ff)):
                w.add_tensor(b + name + ".weight", q8(rows, cols), "Q8_0", (cols, rows))
    w.write(path)


def llama_bench(exe: str, path: Path, threads: int) -> float:
    import json
    out = subprocess.run([exe, "-m", str(path), "-t", str(threads), "-p", "0", "-n", str(N_TG), "-r", "1",
                          "-o", "json"], check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)[0]["avg_ts"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--used", type=int, default=4)
    ap.add_argument("--expert-ff", type=int, default=512)
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench, run on the same two files")
    args = ap.parse_args()
    print(machine.describe(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        moe, dense = Path(tmp) / "moe.gguf", Path(tmp) / "dense.gguf"
        write(moe, "qwen3moe", args.expert_ff, args.experts, args.used)
        write(dense, "qwen3", args.expert_ff * args.used)
        print(f"qwen3moe: {args.experts} experts of {args.expert_ff}, {args.used} per token "
              f"({moe.stat().st_size / 2**20:.0f} MiB); qwen3: FFN of {args.expert_ff * args.used} "
              f"({dense.stat().st_size / 2**20:.0f} MiB); d={D}, {LAYERS} layers, Q8_0")
        runs = {}
        for name, path in (("moe", moe), ("dense", dense)):
            llm = llamay.load(path, threads=args.threads, n_ctx=1024)
            prompt = [1, 2, 3, 4]
            runs[name] = lambda llm=llm, prompt=prompt: N_TG / time_decode(llm, N_TG, prompt)
            runs[name]()  # warm: pages mapped, plans built
        if args.llama_bench:
            runs["llama.cpp moe"] = lambda: llama_bench(args.llama_bench, moe, args.threads)
            runs["llama.cpp dense"] = lambda: llama_bench(args.llama_bench, dense, args.threads)
        got = {name: [] for name in runs}
        for _ in range(args.reps):  # interleaved: both see the same machine
            for name, run in runs.items():
                got[name].append(run())
        med = {name: statistics.median(v) for name, v in got.items()}
        for name, v in got.items():
            print(f"{name:16s} decode {med[name]:7.1f} tok/s  (runs: {', '.join(f'{x:.1f}' for x in v)})")
        print(f"llamay MoE / dense: {med['moe'] / med['dense']:.3f} (target >= 0.85)")
        if args.llama_bench:
            print(f"llama.cpp MoE / dense: {med['llama.cpp moe'] / med['llama.cpp dense']:.3f}; "
                  f"llamay / llama.cpp: MoE {med['moe'] / med['llama.cpp moe']:.2f}x, "
                  f"dense {med['dense'] / med['llama.cpp dense']:.2f}x")
    print(machine.load())


if __name__ == "__main__":
    main()
