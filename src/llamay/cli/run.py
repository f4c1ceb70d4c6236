"""Answer PROMPT (Ollama's `run MODEL PROMPT`) or complete -p's text, streamed; with neither, chat interactively.
Standard input that is not a terminal is a message answered once, as in Ollama (before PROMPT, a space between:
`echo "why is the sky blue" | llamay run MODEL`), unless -p or -f names the prompt or --interactive reads its
lines as the chat's."""
from __future__ import annotations

import os
import sys

from ..chat import ChatTemplateError
from ..engine.sampling import SamplingParams
from .chat import chat, timings
from .common import (
    CTX_HELP,
    PENALTY,
    PROBABILITY,
    SEED,
    TEMPERATURE,
    TOP_K,
    CLIError,
    add_lora_arg,
    add_cache_args,
    add_spec_arg,
    add_model_args,
    eprint,
    load_model,
    resolve_named,
    load_options,
    n_predict,
    ranged,
    seed_of,
)
from .conversation import Conversation


def add_parser(p):
    p.add_argument("model_pos", nargs="?", metavar="MODEL", help="as -m (Ollama's `run MODEL`)")
    p.add_argument("prompt_pos", nargs="?", metavar="PROMPT",
                   help="a message answered once through the chat template, as Ollama's `run MODEL PROMPT`")
    add_model_args(p)
    add_lora_arg(p)
    add_spec_arg(p)
    add_cache_args(p)
    p.add_argument("--interactive", action="store_true",
                   help="chat even when standard input is not a terminal (its lines are messages and /commands); "
                        "without it, piped input is one message, answered once (Ollama's rule)")
    p.add_argument("-p", "--prompt", help="text to complete (no chat template unless --system); omit for a chat")
    p.add_argument("--system", metavar="TEXT", help="the system message: the chat starts with it; with -p or -f the "
                                                  "prompt goes through the chat template as system + one user message")
    p.add_argument("-f", "--file", metavar="FILE", help="read the prompt from FILE ('-': standard input)")
    p.add_argument("--stop", action="append", default=None, metavar="TEXT",
                   help="stop generating at TEXT (not printed); repeat for several")
    p.add_argument("-n", "--n-predict", type=n_predict, default=256,
                   help="maximum tokens to generate (default 256; -1: until the context ends)")
    p.add_argument("-c", "--ctx-size", type=ranged(int, 0), default=None, help=CTX_HELP)
    d = SamplingParams()  # the defaults' one source
    p.add_argument("--temp", type=TEMPERATURE, default=d.temperature,
                   help=f"temperature (0: greedy; default {d.temperature})")
    p.add_argument("--top-k", type=TOP_K, default=d.top_k, help=f"default {d.top_k}; 0: off")
    p.add_argument("--top-p", type=PROBABILITY, default=d.top_p, help=f"default {d.top_p}; 1: off")
    p.add_argument("--min-p", type=PROBABILITY, default=d.min_p, help=f"default {d.min_p}; 0: off")
    p.add_argument("--repeat-penalty", type=PENALTY, default=d.repeat_penalty,
                   help=f"default {d.repeat_penalty}; 1: off")
    p.add_argument("--seed", type=SEED, default=d.seed, help="default (and -1): a fresh one each run")
    p.add_argument("--grammar-file", help="a GBNF grammar the output must follow")
    p.add_argument("--json-schema", metavar="FILE", help="a JSON schema file the output must follow")
    p.add_argument("--verbose", action="store_true", help="print timings to stderr")


def _sampling(args) -> dict:
    return dict(max_tokens=None if args.n_predict == -1 else args.n_predict, temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=seed_of(args.seed), stop=args.stop)


def _grammar(llm, args):
    """--grammar-file / --json-schema -> a compiled llamay.grammar.Grammar (or None)."""
    if args.grammar_file and args.json_schema:
        raise CLIError("give --grammar-file or --json-schema, not both")
    path = args.grammar_file or args.json_schema
    if not path:
        return None
    from ..grammar import Grammar, GrammarError
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise CLIError(f"cannot read {path}: {e.strerror}") from None
    try:
        return Grammar.compile(llm.tokenizer, "gbnf" if args.grammar_file else "json_schema", source)
    except GrammarError as e:
        raise CLIError(f"{path}: {e}") from None


def _stream(llm, prompt, args, grammar=None) -> str:
    out = []
    for piece in llm.generate(prompt, grammar=grammar, **_sampling(args)):
        sys.stdout.write(piece)
        sys.stdout.flush()
        out.append(piece)
    if args.verbose:
        eprint("\n" + timings(llm.stats))
    return "".join(out)


def _read_prompt(args):
    """-f FILE into args.prompt (-p and -f are one prompt: give one)."""
    if args.file is None:
        return
    if args.prompt is not None:
        raise CLIError("give -p or -f, not both")
    try:
        if args.file == "-":
            args.prompt = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                args.prompt = f.read()
    except OSError as e:
        raise CLIError(f"cannot read {args.file}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CLIError(f"{args.file} is not UTF-8 text") from None


def _positionals(args) -> bool:
    """Ollama's `run MODEL [PROMPT]`: MODEL is -m, PROMPT a message -> whether there was one."""
    if args.model_pos is not None:
        if args.model is not None:
            raise CLIError("give the model as MODEL or -m, not both")
        if " " in args.model_pos.strip() and not os.path.exists(args.model_pos):
            raise CLIError(f"{args.model_pos!r} is not a model name: the model comes first (llamay run MODEL "
                           "PROMPT), or -p PROMPT with the default model")
        args.model = args.model_pos
    if args.prompt_pos is None:
        return False
    if args.prompt is not None or args.file is not None:
        raise CLIError("give the prompt as PROMPT, -p or -f, not two of them")
    args.prompt = args.prompt_pos
    return True


def _piped() -> bool:
    """Standard input is a pipe or a file (not a terminal; pytest's stand-in, unreadable, is neither)."""
    stdin = sys.stdin
    return stdin is not None and not stdin.isatty() and stdin.readable()


def _read_piped(args) -> bool:
    """Ollama's rule: piped standard input is the message, PROMPT (if any) after it and a space -> whether
    there was one. -p or -f (their own prompt) and --interactive (the chat's lines) leave stdin alone."""
    if args.interactive:
        if args.prompt is not None or args.file is not None:
            raise CLIError("--interactive is a chat: give it no PROMPT, -p or -f")
        return False
    if args.file is not None or (args.prompt is not None and args.prompt_pos is None) or not _piped():
        return False
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError:
        raise CLIError("standard input is not UTF-8 text") from None
    parts = [t for t in (text, args.prompt) if t]  # Ollama joins them with a space
    if not parts:
        raise CLIError("standard input is empty: pipe a message (or run in a terminal for a chat, or "
                       "give --interactive)")
    args.prompt = " ".join(parts)
    return True


def run(args):
    message = _positionals(args)
    message = _read_piped(args) or message
    _read_prompt(args)
    if args.prompt == "":
        raise CLIError("the prompt is empty (-p TEXT; omit -p for a chat)")
    path, name = resolve_named(args.model)
    llm = load_model(path, load_options(args))
    grammar = _grammar(llm, args)
    if args.prompt is not None:
        templated = message or args.system is not None
        _stream(llm, _one_turn(llm, args.system, args.prompt) if templated else args.prompt, args, grammar)
        print()
        return
    chat(llm, _sampling(args), grammar, args.system, args.verbose, name)


def _one_turn(llm, system: str | None, text: str) -> list[int]:
    """PROMPT, or --system with -p: the ids of the template's (system +) one user message."""
    conv = Conversation(llm, system)
    conv.messages.append({"role": "user", "content": text})
    try:
        return conv.prompt()
    except ChatTemplateError as e:
        raise CLIError(f"the chat template refused the prompt: {e}") from None

