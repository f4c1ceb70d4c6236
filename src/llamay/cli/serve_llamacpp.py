"""`llamay serve`'s llama-server flags (ref: ../shared/docs/protocols/llama-server.md §4): sampling defaults
for requests that set none, the chat template, the reasoning split, embedding pooling and the slot files.
add_args(p) adds them to serve's parser; settings(args) gives the server.registry.Settings fields they set."""
from __future__ import annotations

import argparse
import os

from .. import env
from ..chat import ChatTemplate, ChatTemplateError
from ..chat.reasoning import MODES as REASONING_FORMATS
from ..chat.template import CHATML_SOURCE
from ..engine.sampling import SamplingParams
from ..models.encoder_spec import POOLING
from ..server.routes_gate import Routes
from ..settings import SERVER
from .common import PROBABILITY, SEED, TEMPERATURE, TOP_K, CLIError, eprint, n_predict

# --chat-template NAME: llama.cpp's built-in formats (ref: llama.cpp src/llama-chat.cpp) as Jinja; any other
# value must be Jinja source
BUILTIN_TEMPLATES = {
    "chatml": CHATML_SOURCE,
    "llama3": "{%- for m in messages -%}{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + "
              "m['content'] | trim + '<|eot_id|>' -}}{%- endfor -%}"
              "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
    "command-r": "{%- for m in messages -%}{{- '<|START_OF_TURN_TOKEN|><|' + {'system': 'SYSTEM', 'user': 'USER', "
                 "'assistant': 'CHATBOT'}.get(m['role'], m['role'] | upper) + '_TOKEN|>' + m['content'] | trim + "
                 "'<|END_OF_TURN_TOKEN|>' -}}{%- endfor -%}"
                 "{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}",
}


def add_args(p: argparse.ArgumentParser):
    d = SamplingParams()  # llama.cpp's defaults, what the native routes use unless these are given
    unset = "default: each API's own"
    p.add_argument("--temp", type=TEMPERATURE, default=None,
                   help=f"temperature of a request that sets none (0: greedy; {unset}, llama.cpp's {d.temperature})")
    p.add_argument("--top-k", type=TOP_K, default=None, help=f"top-k likewise (0: off; llama.cpp's {d.top_k})")
    p.add_argument("--top-p", type=PROBABILITY, default=None,
                   help=f"top-p likewise (1: off; llama.cpp's {d.top_p})")
    p.add_argument("--min-p", type=PROBABILITY, default=None,
                   help=f"min-p likewise (0: off; llama.cpp's {d.min_p})")
    p.add_argument("--seed", type=SEED, default=None,
                   help="seed of a request that sets none (default, and -1: a fresh one each request)")
    p.add_argument("-n", "--n-predict", type=n_predict, default=None,
                   help="maximum tokens of a request that sets none (default, and -1: until the context ends)")
    p.add_argument("--chat-template", metavar="NAME|JINJA", default=None,
                   help=f"the chat template of every chat instead of the model's: {', '.join(BUILTIN_TEMPLATES)}, "
                        "or a Jinja template's text")
    p.add_argument("--chat-template-file", metavar="FILE", default=None, help="likewise, a Jinja template file")
    p.add_argument("--jinja", dest="jinja", action="store_true", default=None,
                   help="accepted: chat templates are always rendered with Jinja")
    p.add_argument("--no-jinja", dest="jinja", action="store_false", default=None,
                   help="accepted with a note: there is no other renderer, templates are rendered with Jinja")
    p.add_argument("--reasoning-format", choices=REASONING_FORMATS, default=SERVER.reasoning_format,
                   help="<think>...</think> as reasoning: auto (when the chat template uses the tags; default), "
                        "deepseek (always), none (left in the content)")
    p.add_argument("-rea", "--reasoning", choices=("on", "off", "auto"), default=None,
                   help="the chat template's enable_thinking: true (on, auto) or false (off); requests' "
                        "chat_template_kwargs override it (default: none passed, each template's own default)")
    p.add_argument("--pooling", choices=sorted(POOLING.values()), default=None,
                   help="embedding pooling instead of each model's own (none: per-token vectors, on /embeddings)")
    p.add_argument("--slot-save-path", metavar="DIR", default=None,
                   help="enables POST /slots/ID?action=save|restore with files in this directory")
    _add_routes_args(p)
    _add_accepted_args(p)


def _add_routes_args(p: argparse.ArgumentParser):
    """llama-server's flags that turn routes on or off, and what /models lists."""
    p.add_argument("--slots", dest="slots", action="store_true", default=True, help="serve GET /slots (default)")
    p.add_argument("--no-slots", dest="slots", action="store_false", help="GET /slots answers 501")
    p.add_argument("--metrics", dest="metrics", action="store_true", default=True,
                   help="serve /metrics (default: on, the Studio plots it)")
    p.add_argument("--no-metrics", dest="metrics", action="store_false", help="/metrics answers 501")
    p.add_argument("--no-ui", dest="ui", action="store_false", default=True,
                   help="no Studio: /studio is a 404 and a browser opening / is not sent there")
    p.add_argument("--tags", metavar="TAG,...", default=None,
                   help="tags /models lists for the first -m model (comma-separated)")
    p.add_argument("--context-shift", action="store_true", help="refused: llamay never shifts a context")
    p.add_argument("-v", "--verbose", action="store_true", default=False,
                   help="chat results carry llama-server's __verbose (the raw result and its prompt) unless a "
                        "request sets verbose false; the request log is on unless -q")
    p.add_argument("--cors-origins", dest="origins", metavar="ORIGIN,...", type=env.comma_list, default=None,
                   help="llama-server's name of --origins")


# llama-server flags llamay takes and needs nothing for: (flags, takes a value, why)
ACCEPTED = ((("-ub", "--ubatch-size"), True, "one forward pass takes the whole batch"),
            (("-cb", "--cont-batching"), False, "batching is always continuous"),
            (("--embedding", "--embeddings"), False, "every model is served for embeddings too"),
            (("--reranking", "--rerank"), False, "a rank-pooling model reranks without it"),
            (("--swa-full",), False, "sliding-window layers keep the whole window"),
            (("-fa", "--flash-attn"), True, "attention is one kernel on the CPU"),
            (("--cache-ram", "-cram"), True, "the prefix cache lives in the KV pages (--kv-budget)"),
            (("--no-cache-idle-slots",), False, "idle slots hold no K/V of their own"),
            (("--no-mmproj",), False, "no multimodal projector is loaded"),
            (("--no-context-shift",), False, "llamay never shifts a context (--context-shift is refused)"),
            (("-bs", "--backend-sampling"), False, "sampling runs on the CPU, with the same result"))


def dashed(argv: list[str]) -> list[str]:
    """A long flag spelled with underscores (--backend_sampling) as the dashed one, as llama-server's parser
    reads every flag."""
    return [_dashed(a) if a.startswith("--") else a for a in argv]


def _dashed(arg: str) -> str:
    flag, eq, value = arg.partition("=")
    return flag.replace("_", "-") + eq + value


def _add_accepted_args(p: argparse.ArgumentParser):
    for flags, value, why in ACCEPTED:
        if value:
            p.add_argument(*flags, metavar="N", default=None, help=f"accepted and ignored: {why}")
        else:
            p.add_argument(*flags, action="store_true", default=None, help=f"accepted and ignored: {why}")


def settings(args) -> dict:
    if args.jinja is False:
        eprint("llamay: note: --no-jinja: llamay renders every chat template with Jinja (in a sandbox), it has "
               "no other renderer")
    sampling = {k: v for k, v in (("temperature", args.temp), ("top_k", args.top_k), ("top_p", args.top_p),
                                  ("min_p", args.min_p), ("seed", args.seed)) if v is not None and v != -1}
    if args.context_shift:
        raise CLIError("--context-shift: llamay does not shift contexts (dropping old tokens would make the "
                       "output a new computation, not the prompt's); a prompt over -c is refused and generation "
                       "stops at the context's end, as llama-server does without the flag")
    save_dir = args.slot_save_path
    if save_dir is not None and not os.path.isdir(save_dir):
        raise CLIError(f"--slot-save-path {save_dir}: not a directory")
    return {"sampling": sampling, "n_predict": None if args.n_predict in (None, -1) else args.n_predict,
            "chat_template": _chat_template(args), "reasoning_format": args.reasoning_format,
            "enable_thinking": None if args.reasoning is None else args.reasoning != "off",
            "pooling": args.pooling, "slot_save_path": save_dir, "verbose": args.verbose,
            "routes": Routes(slots=args.slots, metrics=args.metrics, ui=args.ui), "tags": _tags(args.tags)}


def _tags(text: str | None) -> tuple[str, ...]:
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def _chat_template(args) -> str | None:
    """--chat-template's built-in or Jinja text, or --chat-template-file's; compiled once to fail here."""
    if args.chat_template is not None and args.chat_template_file is not None:
        raise CLIError("give --chat-template or --chat-template-file, not both")
    source, where = args.chat_template, "--chat-template"
    if args.chat_template_file is not None:
        where = args.chat_template_file
        try:
            with open(where, encoding="utf-8") as f:
                source = f.read()
        except OSError as e:
            raise CLIError(f"cannot read {where}: {e.strerror}") from None
    elif source in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[source]
    elif source is not None and "{{" not in source and "{%" not in source:
        raise CLIError(f"--chat-template {source}: not a built-in template ({', '.join(BUILTIN_TEMPLATES)}) nor "
                       "Jinja text; give a template file with --chat-template-file")
    if source is None:
        return None
    try:
        ChatTemplate(source)
    except ChatTemplateError as e:
        raise CLIError(f"{where}: {e}") from None
    return source
