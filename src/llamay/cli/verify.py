"""Check that this file computes the same logits every way llamay can get there (exit 1 if not)."""
from __future__ import annotations

from ..measure.verify import format_table, kv_advice, run_verify
from .common import add_model_args, progress_bar, ranged, resolve_model


def add_parser(p):
    add_model_args(p)
    p.add_argument("--tokens", type=ranged(int, 2), default=48, help="tokens of the fixed text checked (default 48)")


def run(args):
    path = resolve_model(args.model)
    with progress_bar("verifying", "checks") as step:
        checks = run_verify(path, args.threads, args.tokens, step)
    print(format_table(checks))
    advice = kv_advice(checks)
    if advice:
        print("\n" + advice)
    failed = [c.name for c in checks if not c.ok]
    if failed:
        print(f"\n{len(failed)} check(s) failed: " + "; ".join(failed))
    return 1 if failed else 0
