"""Contexts as files: create, fork, continue (gen) and show .llamayctx snapshots."""
from __future__ import annotations

import functools
import os
import sys
import time

from ..kv.snapshot_format import SnapshotError, SnapshotFile
from ..engine.sampling import SamplingParams
from .common import (CLIError, HelpFormat, add_lora_arg, add_model_args, input_file, load_model, load_options, output_file,
                     progress_bar, ranged)

PREFILL_CHUNK = 512  # tokens per step of a long create's progress bar (chunked prefill gives the same bits)


def add_parser(p):
    sub = p.add_subparsers(dest="ctx_command", required=True)
    sub.add_parser = functools.partial(sub.add_parser, formatter_class=HelpFormat)
    c = sub.add_parser("create", help="prefill a prompt and save the context")
    add_model_args(c)
    add_lora_arg(c)
    c.add_argument("-p", "--prompt", required=True)
    c.add_argument("-o", "--output", required=True)
    f = sub.add_parser("fork", help="fork a saved context n ways (copy-on-write) and save the branches")
    add_model_args(f)
    add_lora_arg(f)
    f.add_argument("-i", "--input", required=True)
    f.add_argument("-n", type=ranged(int, 1), default=8, help="branches")
    f.add_argument("-o", "--output", required=True, help="folder for the branches")
    g = sub.add_parser("gen", help="continue a saved context")
    add_model_args(g)
    add_lora_arg(g)
    g.add_argument("-i", "--input", required=True)
    g.add_argument("-p", "--prompt", default="", help="text appended before generating")
    g.add_argument("-n", "--n-predict", type=ranged(int, 1), default=128, help="maximum tokens to generate")
    g.add_argument("--temp", type=ranged(float, 0.0), default=SamplingParams().temperature, help="temperature (0: greedy)")
    g.add_argument("--seed", type=int, default=None, help="default: a fresh one each run")
    g.add_argument("-o", "--output", help="save the continued context here")
    s = sub.add_parser("show", help="describe a snapshot file")
    s.add_argument("file")


def run(args):
    try:
        return {"create": _create, "fork": _fork, "gen": _gen, "show": _show}[args.ctx_command](args)
    except FileNotFoundError as e:
        raise CLIError(f"no such file: {e.filename}") from None
    except (SnapshotError, ValueError) as e:  # ValueError: a prompt that does not fit
        raise CLIError(str(e)) from None


def _create(args):
    output_file(args.output)
    llm = load_model(args.model, load_options(args))
    ids = llm.tokenize(args.prompt)
    llm.check_ids(ids)
    t = time.perf_counter()
    with progress_bar("prefilling", "tokens") as step:
        ctx = llm.create_context(ids[:PREFILL_CHUNK])
        for i in range(PREFILL_CHUNK, len(ids), PREFILL_CHUNK):
            step(i, len(ids))
            ctx.extend(ids[i:i + PREFILL_CHUNK])
        if len(ids) > PREFILL_CHUNK:
            step(len(ids), len(ids))
    dt = time.perf_counter() - t
    ctx.save(args.output)
    print(f"{args.output}: {len(ctx.tokens)} tokens, {ctx.n_pages} pages, prefill {dt:.3f} s")


def _fork(args):
    input_file(args.input)
    llm = load_model(args.model, load_options(args))
    base = llm.restore_context(args.input)
    state = llm.kv_view()
    page_bytes = state.bytes_per_page
    before = state.stats.pages_allocated
    t = time.perf_counter()
    kids = base.fork(args.n)
    per_branch = (time.perf_counter() - t) / args.n
    allocated = state.stats.pages_allocated - before
    os.makedirs(args.output, exist_ok=True)
    for i, kid in enumerate(kids):
        kid.save(os.path.join(args.output, f"branch-{i}.llamayctx"))
    copy_pages = base.n_pages * args.n
    print(f"base: {len(base.tokens)} tokens, {base.n_pages} pages")
    print(f"forked {args.n} ways: {per_branch * 1e6:.1f} us per branch, {allocated} pages allocated "
          f"(a copy would need {copy_pages})")
    print(f"memory held: {(base.n_pages + allocated) * page_bytes / 2**20:.2f} MiB "
          f"vs {(base.n_pages + copy_pages) * page_bytes / 2**20:.2f} MiB for copies")
    print(f"branches saved in {args.output}")


def _gen(args):
    input_file(args.input)
    if args.output:
        output_file(args.output)
    llm = load_model(args.model, load_options(args))
    ctx = llm.restore_context(args.input)
    if args.prompt:
        ctx.extend(args.prompt)
    for piece in ctx.generate(max_tokens=args.n_predict, temperature=args.temp, seed=args.seed):
        sys.stdout.write(piece)
        sys.stdout.flush()
    print()
    if args.output:
        ctx.save(args.output)


def _show(args):
    with SnapshotFile(input_file(args.file)) as f:
        h, g = f.header, f.header.geometry
        print(f"file          {args.file} ({f.size} bytes)")
        print(f"tokens        {len(h.token_ids)}")
        print(f"pages         {h.n_pages} x {g.page_size} slots")
        shapes = sorted({g.layer(i)[:2] for i in range(g.n_layer)})
        heads = ", ".join(f"{h} KV heads x {d}" for h, d in shapes)
        print(f"architecture  {g.arch}: {g.n_layer} KV layers, {heads}")
        print(f"KV type       {g.kv_type}")
        print(f"weights       sha256 {h.weights_digest}")
        print(f"first tokens  {' '.join(map(str, h.token_ids[:16]))}{' ...' if len(h.token_ids) > 16 else ''}")
