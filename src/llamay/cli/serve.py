"""Serve models over HTTP: OpenAI, Anthropic, Ollama and llama-server APIs plus context routes."""
from __future__ import annotations

import argparse
import ipaddress

from .. import env
from ..defaults import DEFAULT_PULL, default_model_path
from ..kv import KV_TYPES
from ..settings import LOAD, SCHEDULER, SERVER
from .common import KV_HELP, THREADS, THREADS_HELP, CLIError, add_lora_arg, eprint, parse_size, ranged


def add_parser(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", action="append", default=None,
                   help="a GGUF file or stored model, the default for requests that name none (repeat for several); "
                        "every stored model is served by name too")
    p.add_argument("--host", default=SERVER.host, help=f"address to listen on (default {SERVER.host}, loopback only)")
    p.add_argument("--port", type=ranged(int, 1, 65535), default=SERVER.port, help=f"port (default {SERVER.port})")
    p.add_argument("--concurrency", type=int, default=SCHEDULER.concurrency,
                   help=f"sequences generated at once per model (default {SCHEDULER.concurrency})")
    p.add_argument("--batch", type=int, default=SCHEDULER.batch,
                   help=f"tokens per forward pass (default {SCHEDULER.batch})")
    p.add_argument("--queue", type=int, default=SCHEDULER.max_queue,
                   help=f"requests waiting per model before 503 (default {SCHEDULER.max_queue})")
    p.add_argument("-t", "--threads", type=THREADS, default=LOAD.threads, help=THREADS_HELP)
    p.add_argument("-c", "--ctx-size", type=ranged(int, 1), default=None,
                   help=f"context length (default {LOAD.n_ctx}, at most the model's)")
    p.add_argument("--kv", default=LOAD.kv, choices=list(KV_TYPES), help=KV_HELP)
    p.add_argument("--kv-budget", type=parse_size, default=LOAD.kv_budget,
                   help=f"memory for KV pages per model, e.g. 512M (default: room for {LOAD.pool_contexts} full "
                        "contexts)")
    add_lora_arg(p)
    p.add_argument("--grammar-file", default=None,
                   help="a GBNF grammar every request follows unless it asks for its own format")
    p.add_argument("--max-contexts", type=int, default=SERVER.max_contexts,
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


def guard_settings(args):
    """The guard's settings from the flags, each falling back to its LLAMAY_ variable."""
    from ..server import guard
    hosts = args.allowed_hosts if args.allowed_hosts is not None else env.allowed_hosts()
    origins = args.origins if args.origins is not None else env.origins()
    return guard.serving(args.host, hosts, origins, args.api_key or env.api_key())


def build_app(args):
    from ..server import models
    from ..server.app import create_app
    if args.concurrency < 1 or args.batch < 1 or args.queue < 0 or args.max_contexts < 0:
        raise CLIError("--concurrency and --batch must be at least 1, --queue and --max-contexts at least 0")
    settings = models.Settings(threads=args.threads, kv=args.kv, kv_budget=args.kv_budget, n_ctx=args.ctx_size,
                               concurrency=args.concurrency, batch=args.batch, max_queue=args.queue,
                               keep_alive=args.keep_alive, grammar=_read(args.grammar_file),
                               max_contexts=args.max_contexts, context_ttl=args.context_ttl,
                               lora=tuple(args.lora or ()))
    try:
        default = default_model_path()
        registry = models.Registry(args.model or [], settings, fallback=str(default) if default else None)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if not registry.paths:
        raise CLIError(f"no model to serve: llamay pull {DEFAULT_PULL}")
    return create_app(registry, guard_settings(args))


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CLIError(f"cannot read {path}: {e.strerror}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args):
    import uvicorn
    app = build_app(args)
    if not _is_loopback(args.host) and not app.state.guard.api_key:
        eprint(f"llamay: warning: listening on {args.host}: other machines can reach this server and there is "
               "no authentication (--api-key or LLAMAY_API_KEY)")
    from ..models.spec import BUILDERS
    names = ", ".join(app.state.registry.paths)
    eprint(f"llamay: serving {names} on http://{args.host}:{args.port} ({len(BUILDERS)} decoder architectures)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
