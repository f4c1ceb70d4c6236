"""`llamay` command: one module per subcommand, each with add_parser(subparsers) and run(args)."""
from __future__ import annotations

import argparse
import os
import sys

from . import (bench, cache, ctx, embed, ps, pull, quantize, route, run, serve, serve_llamacpp, store_cmds, tokenize,
               verify)
from .. import __version__, env
from ..gguf import GGUFError
from ..models import UnsupportedModel
from ..store import StoreError
from .common import CLIError, HelpFormat

COMMANDS = {"run": run, "serve": serve, "pull": pull, "list": store_cmds.LIST, "show": store_cmds.SHOW,
            "rm": store_cmds.RM, "cp": store_cmds.CP, "tokenize": tokenize, "bench": bench, "verify": verify,
            "ctx": ctx, "embed": embed.EMBED, "rerank": embed.RERANK, "quantize": quantize, "ps": ps.PS,
            "stop": ps.STOP, "cache": cache, "route": route}


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line and exit status 1, as every other failure."""

    def error(self, message):
        self.exit(1, f"{self.prog}: error: {message}\n")


def summary(doc: str) -> str:
    """A command's one-line summary: its docstring's first paragraph, whole."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llamay", description="Run GGUF language models locally.")
    parser.add_argument("--version", action="version", version=f"llamay {__version__}")
    sub = parser.add_subparsers(dest="command")
    for name, module in COMMANDS.items():
        module.add_parser(sub.add_parser(name, help=summary(module.__doc__), formatter_class=HelpFormat,
                                         description=summary(module.__doc__)))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # a llama-server command line
        argv = serve_llamacpp.dashed(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "prompt_pos", "") is None and len(extra) == 1 and not extra[0].startswith("-"):
        args.prompt_pos = extra[0]  # `run MODEL -n 8 PROMPT`: argparse takes both positionals at the first one
    elif extra:
        parser.parse_args(argv)  # the usual error for what is left over
    if args.command is None:  # bare `llamay`: what it can do
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command].run(args) or 0
    except CLIError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `llamay ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (GGUFError, UnsupportedModel, StoreError) as e:  # messages made for users, from below the CLI
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
    except Exception as e:  # noqa: BLE001 - a bug: one line still, the traceback on request
        if env.debug():
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (LLAMAY_DEBUG=1 shows where)")


def _fail(message: str) -> int:
    print(f"llamay: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
