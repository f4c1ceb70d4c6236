"""Complete a prompt (-p), streamed to stdout; without -p, chat interactively with the model's template."""
from __future__ import annotations

import argparse
import sys

from ..chat import ChatTemplateError, prompt_ids, template_for
from ..engine.sampling import SamplingParams
from ..settings import LOAD
from .common import CLIError, add_lora_arg, add_model_args, eprint, load_model, ranged


def add_parser(p):
    add_model_args(p)
    add_lora_arg(p)
    p.add_argument("-p", "--prompt", help="text to complete (no chat template); omit for a chat")
    p.add_argument("-n", "--n-predict", type=_n_predict, default=256,
                   help="maximum tokens to generate (default 256; -1: until the context ends)")
    p.add_argument("-c", "--ctx-size", type=ranged(int, 1), default=None,
                   help=f"context length in tokens (default {LOAD.n_ctx}, at most the model's)")
    d = SamplingParams()  # the defaults' one source
    p.add_argument("--temp", type=ranged(float, 0.0), default=d.temperature,
                   help=f"temperature (0: greedy; default {d.temperature})")
    p.add_argument("--top-k", type=ranged(int, 0), default=d.top_k, help=f"default {d.top_k}; 0: off")
    p.add_argument("--top-p", type=ranged(float, 0.0, 1.0), default=d.top_p, help=f"default {d.top_p}; 1: off")
    p.add_argument("--min-p", type=ranged(float, 0.0, 1.0), default=d.min_p, help=f"default {d.min_p}; 0: off")
    p.add_argument("--repeat-penalty", type=ranged(float, 0.0, lo_open=True), default=d.repeat_penalty,
                   help=f"default {d.repeat_penalty}; 1: off")
    p.add_argument("--seed", type=int, default=d.seed, help="default: a fresh one each run")
    p.add_argument("--grammar-file", help="a GBNF grammar the output must follow")
    p.add_argument("--json-schema", metavar="FILE", help="a JSON schema file the output must follow")
    p.add_argument("--verbose", action="store_true", help="print timings to stderr")


def _n_predict(text: str) -> int:
    """-n: at least 1, or -1 for no limit but the context (llama.cpp's convention)."""
    n = ranged(int, -1)(text)
    if n == 0:
        raise argparse.ArgumentTypeError("0 would generate nothing: give at least 1, or -1 for no limit")
    return n


def _sampling(args) -> dict:
    return dict(max_tokens=None if args.n_predict == -1 else args.n_predict, temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed)


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
        s = llm.stats
        eprint(f"\nprompt: {s.prompt_tokens} tokens ({s.cached_tokens} cached) in {s.prefill_s:.3f} s; "
               f"generated {s.generated_tokens} tokens in {s.decode_s:.3f} s "
               f"({s.generated_tokens / max(s.decode_s, 1e-9):.1f} tok/s); finish: {s.finish_reason}")
    return "".join(out)


def run(args):
    if args.prompt == "":
        raise CLIError("the prompt is empty (-p TEXT; omit -p for a chat)")
    llm = load_model(args.model, args.threads, args.ctx_size, args.kv, args.kv_budget, lora=args.lora)
    grammar = _grammar(llm, args)
    if args.prompt is not None:
        _stream(llm, args.prompt, args, grammar)
        print()
        return
    _chat(llm, args, grammar)


def _chat(llm, args, grammar):
    try:
        template = template_for(llm.metadata, llm.tokenizer)
    except ChatTemplateError as e:
        raise CLIError(f"the model's chat template is broken: {e}") from None
    messages: list[dict] = []
    eprint("Chat with the model; an empty line or Ctrl-D ends it.")
    while True:
        try:
            line = input(">>> ")
        except EOFError:
            break
        if not line.strip():
            break
        messages.append({"role": "user", "content": line})
        try:
            ids = prompt_ids(template, llm.tokenizer, messages)
        except ChatTemplateError as e:
            eprint(f"llamay: the chat template refused this conversation: {e}")
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": _stream(llm, ids, args, grammar)})
        print()
