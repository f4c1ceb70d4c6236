"""`llamay` command: one module per subcommand, each with add_parser(subparsers) and run(args)."""
from __future__ import annotations

import argparse
import sys

from . import bench, ctx, embed, pull, quantize, run, serve, store_cmds, tokenize, verify
from .common import CLIError

COMMANDS = {"run": run, "serve": serve, "pull": pull, "list": store_cmds.LIST, "show": store_cmds.SHOW,
            "rm": store_cmds.RM, "cp": store_cmds.CP, "tokenize": tokenize, "bench": bench, "verify": verify,
            "ctx": ctx, "embed": embed.EMBED, "rerank": embed.RERANK, "quantize": quantize}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llamay", description="Run GGUF language models locally.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        module.add_parser(sub.add_parser(name, help=module.__doc__.splitlines()[0]))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args) or 0
    except CLIError as e:
        print(f"llamay: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
