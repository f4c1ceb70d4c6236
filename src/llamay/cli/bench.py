"""Measure prefill and decode speed (tok/s, medians of repeated runs)."""
from __future__ import annotations

import json

from ..tools.bench import run_bench
from .common import add_model_args, progress_bar, ranged, resolve_model


def add_parser(p):
    add_model_args(p)
    p.add_argument("--prefill", type=ranged(int, 1), default=512, help="prompt tokens (default 512)")
    p.add_argument("--decode", type=ranged(int, 1), default=128, help="generated tokens (default 128)")
    p.add_argument("-r", "--reps", type=ranged(int, 1), default=3, help="repetitions, the median reported (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args):
    path = resolve_model(args.model)
    with progress_bar("benchmarking", "runs") as step:
        r = run_bench(path, args.threads, args.prefill, args.decode, args.reps, args.kv, step)
    if args.json:
        print(json.dumps(r.as_dict()))
        return
    print(f"model        {r.model}")
    print(f"threads      {r.threads}")
    print(f"prefill {r.n_prefill:<4} {r.prefill_tok_s:8.1f} tok/s")
    print(f"decode  {r.n_decode:<4} {r.decode_tok_s:8.1f} tok/s")
    print(f"load {r.load_s:.3f} s, first token {r.first_token_s:.3f} s after open")
