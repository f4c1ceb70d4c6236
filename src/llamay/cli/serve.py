"""Serve models over HTTP: OpenAI, Anthropic, Ollama and llama-server APIs plus context routes."""
from __future__ import annotations

import argparse
import errno
import os
import socket

from .. import env
from ..defaults import DEFAULT_PULL, default_model_path
from ..kv import KV_TYPES
from ..settings import LOAD, SCHEDULER, SERVER, UPSTREAM
from . import serve_llamacpp
from .common import (
    CTX_HELP,
    KV_HELP,
    THREADS,
    THREADS_HELP,
    CLIError,
    add_lora_arg,
    add_cache_args,
    load_options,
    add_spec_arg,
    budget_note,
    eprint,
    parse_size,
    ranged,
)

# llama-server's -ctk/-ctv pairs that are one of llamay's KV types (keys, values) -> --kv
LLAMA_KV = {("f32", "f32"): "f32", ("f16", "f16"): "f16", ("q8_0", "q8_0"): "q8", ("f16", "q8_0"): "vq8"}


def add_parser(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", action="append", default=None,
                   help="a GGUF file or stored model, the default for requests that name none (repeat for several); "
                        "every stored model is served by name too")
    p.add_argument("--host", default=SERVER.host,
                   help=f"address to listen on, or several comma-separated (default {SERVER.host}, loopback only)")
    p.add_argument("--port", type=ranged(int, 1, 65535), default=SERVER.port, help=f"port (default {SERVER.port})")
    p.add_argument("--concurrency", dest="concurrency", type=ranged(int, 1, 256), default=SCHEDULER.concurrency,
                   help=f"sequences generated at once per model, each up to -c tokens (default "
                        f"{SCHEDULER.concurrency})")
    p.add_argument("-np", "--parallel", dest="parallel", type=ranged(int, 1, 256), default=None,
                   help="llama-server's slots: N sequences at once, each of -c/N tokens (-c is their total, as in "
                        "llama-server; with --kv-unified each may use all of -c)")
    p.add_argument("-kvu", "--kv-unified", action="store_true",
                   help="with -np: every slot may use the whole -c (llama-server's unified KV)")
    p.add_argument("-b", "--batch", "--batch-size", dest="batch", type=ranged(int, 1, 65536), default=SCHEDULER.batch,
                   help=f"tokens per forward pass (default {SCHEDULER.batch})")
    p.add_argument("--queue", type=ranged(int, 0), default=SCHEDULER.max_queue,
                   help=f"requests waiting per model before 503 (default {SCHEDULER.max_queue})")
    p.add_argument("-t", "--threads", type=THREADS, default=LOAD.threads, help=THREADS_HELP)
    p.add_argument("-c", "--ctx-size", type=ranged(int, 0), default=None, help=CTX_HELP)
    p.add_argument("--kv", default=None, choices=list(KV_TYPES), help=KV_HELP)
    for flag, long in (("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v")):
        p.add_argument(flag, long, choices=sorted({t for pair in LLAMA_KV for t in pair}), default=None,
                       help="llama-server's KV type of the " + ("keys" if flag == "-ctk" else "values") +
                            ": f16 f16 = --kv f16, q8_0 q8_0 = --kv q8, f16 q8_0 = --kv vq8, f32 f32 = --kv f32")
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", metavar="N", default=None,
                   help="accepted for llama-server's command lines and ignored: llamay runs on the CPU")
    p.add_argument("-a", "--alias", default=None, help="the name the first -m model is served and listed as")
    p.add_argument("--strict-model-names", action="store_true",
                   help="answer a model name nobody has with 404, also when one model is served (by default "
                        "such a request gets that model, with its real name in the response, as llama-server does)")
    p.add_argument("-q", "--quiet", action="store_true", help="no log line per request on stderr")
    p.add_argument("--kv-budget", type=parse_size, default=LOAD.kv_budget,
                   help=f"memory for KV pages per model, e.g. 512M (default: room for {LOAD.pool_contexts} full "
                        "contexts)")
    add_lora_arg(p)
    add_spec_arg(p)
    add_cache_args(p)
    p.add_argument("--grammar-file", default=None,
                   help="a GBNF grammar every request follows unless it asks for its own format")
    p.add_argument("--max-contexts", type=ranged(int, 0), default=SERVER.max_contexts,
                   help=f"named contexts (/v1/contexts) open at once (default {SERVER.max_contexts})")
    p.add_argument("--context-ttl", type=float, default=SERVER.context_ttl,
                   help=f"seconds an unused named context is kept (default {SERVER.context_ttl:g}; <=0: forever)")
    p.add_argument("--keep-alive", type=float, default=SERVER.keep_alive,
                   help=f"seconds a model stays loaded after its last request (default {SERVER.keep_alive:g}; "
                        "<0: forever)")
    p.add_argument("--allowed-hosts", type=env.comma_list, default=None,
                   help="Host names accepted besides localhost names, comma-separated globs ('*': any; default: "
                        "localhost names on a loopback --host, any Host on another; env LLAMAY_ALLOWED_HOSTS)")
    p.add_argument("--origins", type=env.comma_list, default=None,
                   help="browser Origins allowed besides same-origin pages, comma-separated globs like "
                        "https://*.example.com ('*': any; env LLAMAY_ORIGINS)")
    p.add_argument("--api-key", default=None,
                   help="require this key on every route but /health, as Authorization: Bearer KEY or "
                        "x-api-key: KEY (env LLAMAY_API_KEY)")
    p.add_argument("--peers", type=env.comma_list, default=(),
                   help="the other workers behind the same gateway, comma-separated URLs: a named context's "
                        "request that reaches this worker is passed to the one holding it")
    p.add_argument("--upstream", action="append", default=[], metavar="NAME=URL[,OPTION=VALUE...]",
                   help="serve the models of an OpenAI-, Anthropic- or Ollama-compatible server as NAME/model through "
                        "every API (repeatable); options: api=openai|anthropic|ollama (default openai), key-env=VAR "
                        "(the environment variable holding its key), timeout=SECONDS (default "
                        f"{UPSTREAM.timeout:g}: how long it may stay silent before 504)")
    serve_llamacpp.add_args(p)


def upstreams(specs: list[str]):
    """--upstream flags -> server.upstream.Upstreams, each key read from the variable it names."""
    from ..server.upstream import Upstream, Upstreams, parse_spec
    out = []
    for text in specs:
        try:
            spec = parse_spec(text)
        except ValueError as e:
            raise CLIError(str(e)) from None
        key = env.named(spec.key_env) if spec.key_env else None
        if spec.key_env and key is None:
            raise CLIError(f"--upstream {spec.name}: key-env={spec.key_env}, but that environment variable is not set")
        if spec.name in {u.spec.name for u in out}:
            raise CLIError(f"--upstream {spec.name}: that name is given twice")
        out.append(Upstream(spec, key))
    return Upstreams(out)


def guard_settings(args):
    """The guard's settings from the flags, each falling back to its LLAMAY_ variable."""
    from ..server import guard
    hosts = args.allowed_hosts if args.allowed_hosts is not None else env.allowed_hosts()
    origins = args.origins if args.origins is not None else env.origins()
    binds = addresses(args.host)
    bind = next((h for h in binds if not guard.is_loopback(h)), binds[0])  # one off loopback sets the policy
    return guard.serving(bind, hosts, origins, args.api_key or env.api_key())


def addresses(host: str) -> list[str]:
    """--host's addresses (llama-server's comma-separated list)."""
    out = [h.strip() for h in host.split(",") if h.strip()]
    if not out:
        raise CLIError(f"--host {host!r}: no address")
    return out


def kv_type(args) -> str:
    """--kv, or llama-server's -ctk/-ctv pair (unset: f16), or the default; a pair llamay has no type for is refused."""
    if args.cache_type_k is None and args.cache_type_v is None:
        return args.kv or LOAD.kv
    pair = (args.cache_type_k or "f16", args.cache_type_v or "f16")
    if pair not in LLAMA_KV:
        raise CLIError(f"-ctk {pair[0]} -ctv {pair[1]}: llamay has no such KV cache; it has "
                       + ", ".join(f"{k} {v} (--kv {t})" for (k, v), t in LLAMA_KV.items()))
    if args.kv is not None and args.kv != LLAMA_KV[pair]:
        raise CLIError(f"--kv {args.kv} and -ctk {pair[0]} -ctv {pair[1]} disagree: give one of them")
    return LLAMA_KV[pair]


def build_app(args, log=None):
    """The app for these flags; log: where each request's line goes (None: nowhere)."""
    from ..server.registry import Registry, Settings
    from ..server.app import create_app
    settings = Settings(load=load_options(args, kv=kv_type(args), **slot_context(args)),
                        concurrency=args.parallel or args.concurrency, batch=args.batch,
                        max_queue=args.queue, keep_alive=args.keep_alive, grammar=_read(args.grammar_file),
                        max_contexts=args.max_contexts, context_ttl=args.context_ttl, alias=args.alias,
                        strict_model_names=args.strict_model_names, **serve_llamacpp.settings(args))
    try:
        default = default_model_path()
        registry = Registry(args.model or [], settings, fallback=str(default) if default else None)
    except ValueError as e:
        raise CLIError(str(e)) from None
    registry.upstreams = upstreams(args.upstream)
    if not registry.paths and not registry.upstreams:
        raise CLIError(f"no model to serve: llamay pull {DEFAULT_PULL}")
    return create_app(registry, guard_settings(args), log, tuple(args.peers))


def slot_context(args) -> dict:
    """llama-server's -c C -np N: C is the slots' total, each gets C/N tokens (unless --kv-unified)."""
    if args.parallel and args.ctx_size and not args.kv_unified:
        if args.ctx_size < args.parallel:
            raise CLIError(f"-c {args.ctx_size} -np {args.parallel}: fewer tokens than slots")
        return {"n_ctx": args.ctx_size // args.parallel}
    return {}


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CLIError(f"cannot read {path}: {e.strerror}") from None


def check_models(registry, options):
    """Each pinned model's header is a GGUF llamay can run (or embed with), before the server says it
    serves; a note for each whose context is shorter than -c, and for each the draft model cannot draft for."""
    from ..gguf import GGUFError, GGUFReader
    from ..models import UnsupportedModel
    from ..engine.llm import context_length
    from ..models.spec import arch_spec
    from ..server.embed_models import is_encoder
    n_ctx, draft_model = options.n_ctx, options.draft_model
    for name, path in registry.pinned.items():
        try:
            if is_encoder(path):
                continue
            spec = arch_spec(GGUFReader(path).metadata)
        except (GGUFError, UnsupportedModel, ValueError, OSError) as e:
            raise CLIError(f"{name}: {e}") from None
        if n_ctx and spec.n_ctx_train < n_ctx:
            eprint(f"llamay: note: -c {n_ctx} is over {name}'s training context: it runs with {spec.n_ctx_train}")
        note = budget_note(spec, context_length(spec, n_ctx), options.kv, options.kv_budget)
        if note:
            eprint(f"llamay: note: {name}: {note}")
        if draft_model:
            _check_draft(name, path, draft_model)


def _check_draft(name: str, path: str, draft_model: str):
    from ..engine.draft_model import DraftMismatch, check_vocab
    from ..engine.embed import file_tokenizer
    from ..gguf import GGUFError, GGUFReader
    try:
        draft = file_tokenizer(GGUFReader(draft_model))
        check_vocab(file_tokenizer(GGUFReader(path)), draft, os.path.basename(draft_model))
    except DraftMismatch as e:
        eprint(f"llamay: note: {name} runs without the draft model: {e}")
    except (GGUFError, ValueError, OSError) as e:
        raise CLIError(f"--draft-model: {e}") from None


def listen(host: str, port: int) -> socket.socket:
    """The bound, listening socket (before anything says it is serving); CLIError when it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise CLIError(f"cannot listen on {host}: {e.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        hint = " (another server is running there: llamay ps, or --port N)" if e.errno == errno.EADDRINUSE else ""
        raise CLIError(f"cannot listen on {host}:{port}: {e.strerror}{hint}") from None
    return sock


def run(args):
    import uvicorn

    from ..server.guard import is_loopback
    app = build_app(args, None if args.quiet else eprint)
    check_models(app.state.registry, app.state.registry.settings.load)
    if args.n_gpu_layers is not None:
        eprint(f"llamay: note: -ngl {args.n_gpu_layers} is ignored: llamay runs on the CPU")
    socks = [listen(host, args.port) for host in addresses(args.host)]
    if not all(is_loopback(h) for h in addresses(args.host)) and not app.state.guard.api_key:
        eprint(f"llamay: warning: listening on {args.host}: other machines can reach this server and there is "
               "no authentication (--api-key or LLAMAY_API_KEY)")
    from ..models.spec import BUILDERS
    names = ", ".join(app.state.registry.paths)
    host = addresses(args.host)[0]
    url = f"http://{f'[{host}]' if ':' in host else host}:{args.port}"
    eprint(f"llamay: serving {names or 'no local model'} on {url} ({len(BUILDERS)} decoder architectures)")
    for up in app.state.registry.upstreams.by_name.values():
        eprint(f"llamay: upstream {up.spec.name}: {up.spec.url} ({up.spec.api} API): its models as {up.spec.name}/MODEL")
    eprint(f"llamay: Studio: {url}/studio")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=socks)
