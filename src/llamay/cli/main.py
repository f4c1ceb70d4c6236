"""`llamay` command: one module per subcommand, each with add_parser(subparsers) and run(args)."""
from __future__ import annotations

import argparse
import sys

from . import bench, ctx, embed, pull, quantize, run, serve, store_cmds, tokenize, verify
from .. import __version__
from .common import CLIError

COMMANDS = {"run": run, "serve": serve, "pull": pull, "list": store_cmds.LIST, "show": store_cmds.SHOW,
            "rm": store_cmds.RM, "cp": store_cmds.CP, "tokenize": tokenize, "bench": bench, "verify": verify,
            "ctx": ctx, "embed": embed.EMBED, "rerank": embed.RERANK, "quantize": quantize}


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line and exit status 1, as every other failure."""

    def error(self, message):
        self.exit(1, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llamay", description="Run GGUF language models locally.")
    parser.add_argument("--version", action="version", version=f"llamay {__version__}")
    sub = parser.add_subparsers(dest="command")
    for name, module in COMMANDS.items():
        module.add_parser(sub.add_parser(name, help=module.__doc__.splitlines()[0]))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `llamay`: what it can do
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command].run(args) or 0
    except CLIError as e:
        print(f"llamay: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
