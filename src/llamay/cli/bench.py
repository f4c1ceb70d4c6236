"""Measure prefill and decode speed (tok/s, medians of repeated runs), or with --spec what speculative
decoding gains on a task."""
from __future__ import annotations

import dataclasses
import json

from ..measure.bench import run_bench, run_spec_bench
from .common import CLIError, add_model_args, progress_bar, ranged, resolve_model, resolve_named


def add_parser(p):
    from ..engine.draft import MODES
    from ..measure.spec_tasks import TASKS
    add_model_args(p)
    p.add_argument("--prefill", type=ranged(int, 1), default=512, help="prompt tokens (default 512)")
    p.add_argument("--decode", type=ranged(int, 1), default=128, help="generated tokens (default 128)")
    p.add_argument("-r", "--reps", type=ranged(int, 1), default=3, help="repetitions, the median reported (default 3)")
    p.add_argument("--spec", choices=[m for m in MODES if m != "none"],
                   help="time speculative decoding in this mode against none on --task instead: decode tok/s "
                        "and tokens per pass")
    p.add_argument("--task", choices=list(TASKS), default="code",
                   help="with --spec: code (rewrite a given file), doc (list a given document's facts), tool "
                        "(a tool call repeating the prompt's arguments), free (nothing to look up); default code")
    p.add_argument("--draft-model", metavar="NAME|FILE", help="with --spec draft: the draft model")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args):
    path, name = resolve_named(args.model)
    if args.spec:
        return run_spec(args, path, name)
    with progress_bar("benchmarking", "runs") as step:
        r = run_bench(path, args.threads, args.prefill, args.decode, args.reps, args.kv, step)
    r = dataclasses.replace(r, model=name)
    if args.json:
        print(json.dumps(r.as_dict()))
        return
    print(f"model        {r.model}")
    print(f"threads      {r.threads}")
    measured = ", ".join(f"{p} {t:.2f}x" for p, t in sorted((r.kernels_measured or {}).items(), key=lambda kv: kv[1]))
    print(f"kernels      {r.kernels}" + (f" (measured, time relative to the fastest: {measured})" if measured else ""))
    print(f"prefill {r.n_prefill:<4} {r.prefill_tok_s:8.1f} tok/s")
    print(f"decode  {r.n_decode:<4} {r.decode_tok_s:8.1f} tok/s")
    print(f"load {r.load_s:.3f} s, first token {r.first_token_s:.3f} s after open")


def run_spec(args, path: str, name: str):
    draft = resolve_model(args.draft_model) if args.draft_model else None
    if (args.spec == "draft") != (draft is not None):
        raise CLIError("--spec draft and --draft-model go together")
    with progress_bar("benchmarking", "runs") as step:
        try:
            r = run_spec_bench(path, args.threads, args.spec, args.task, args.decode, args.reps, args.kv, draft, step)
        except ValueError as e:
            raise CLIError(str(e)) from None
    r = dataclasses.replace(r, model=name)
    if args.json:
        print(json.dumps(r.as_dict()))
        return
    print(f"model        {r.model}")
    print(f"threads      {r.threads}")
    print(f"task         {r.task}, {r.n_decode} tokens generated")
    print(f"spec none    {r.plain_tok_s:8.1f} tok/s")
    print(f"spec {r.mode:<7} {r.spec_tok_s:8.1f} tok/s  ({r.spec_tok_s / r.plain_tok_s:.2f}x)")
    print(f"accepted     {r.accepted_tokens} of {r.drafted_tokens} draft tokens in {r.draft_steps} passes; "
          f"{r.tokens_per_pass:.2f} tokens per decode pass")
