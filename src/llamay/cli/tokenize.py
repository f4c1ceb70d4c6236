"""Print the token ids and pieces of a text."""
from __future__ import annotations

from ..gguf import GGUFError, GGUFReader
from ..tokenizer import Tokenizer
from .common import CLIError, add_model_arg, resolve_model


def add_parser(p):
    add_model_arg(p)
    p.add_argument("text")
    p.add_argument("--no-special", action="store_true", help="do not add BOS/EOS")
    p.add_argument("--parse-special", action="store_true", help="match special tokens written in the text")
    p.add_argument("--ids", action="store_true", help="print only the ids")


def run(args):
    try:
        tok = Tokenizer.from_gguf(GGUFReader(resolve_model(args.model)))
    except (GGUFError, ValueError) as e:
        raise CLIError(str(e)) from None
    ids = tok.encode(args.text, add_special=not args.no_special, parse_special=args.parse_special)
    if args.ids:
        print(" ".join(map(str, ids)))
        return
    for tid in ids:
        print(f"{tid:>8} {tok.piece(tid).decode('utf-8', 'backslashreplace')!r}")
