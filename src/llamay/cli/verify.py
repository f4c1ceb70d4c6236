"""Check that this file computes the same logits every way llamay can get there (exit 1 if not)."""
from __future__ import annotations

from ..tools.verify import format_table, run_verify
from .common import add_model_args, resolve_model


def add_parser(p):
    add_model_args(p)
    p.add_argument("--tokens", type=int, default=48, help="tokens of the fixed text checked (default 48)")


def run(args):
    checks = run_verify(resolve_model(args.model), args.threads, args.tokens)
    print(format_table(checks))
    failed = [c.name for c in checks if not c.ok]
    if failed:
        print(f"\n{len(failed)} check(s) failed: " + "; ".join(failed))
    return 1 if failed else 0
