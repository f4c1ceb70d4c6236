"""Route requests over several llamay servers: one address, prompts of a shared prefix to the same server."""
from __future__ import annotations

import argparse
from dataclasses import replace
from urllib.parse import urlsplit

from .. import env
from ..settings import ROUTE
from .common import CLIError, eprint, ranged


def add_parser(p: argparse.ArgumentParser):
    p.add_argument("backends", nargs="+", metavar="URL",
                   help="the llamay serve (or llama-server) addresses to route over, e.g. http://127.0.0.1:11437")
    p.add_argument("--host", default=ROUTE.host, help=f"address to listen on (default {ROUTE.host}, loopback only)")
    p.add_argument("--port", type=ranged(int, 1, 65535), default=ROUTE.port, help=f"port (default {ROUTE.port})")
    p.add_argument("--prefix-chars", type=ranged(int, 1), default=ROUTE.prefix_chars,
                   help="characters of the prompt that pick its server (default %(default)s: about one KV page)")
    p.add_argument("--load-factor", type=float, default=ROUTE.load_factor,
                   help="a server takes at most this times the mean load before requests spill to the next "
                        "(default %(default)s)")
    p.add_argument("--health-interval", type=float, default=ROUTE.health_interval,
                   help="seconds between health checks (default %(default)s)")
    p.add_argument("--allowed-hosts", type=env.comma_list, default=None,
                   help="Host names accepted besides localhost names (as llamay serve's)")
    p.add_argument("--origins", type=env.comma_list, default=None,
                   help="browser Origins allowed besides same-origin pages (as llamay serve's)")
    p.add_argument("--api-key", default=None,
                   help="require this key at the front too (the backends check their own; env LLAMAY_API_KEY)")


def settings(args):
    if args.load_factor < 1 or args.health_interval <= 0:
        raise CLIError("--load-factor must be at least 1 and --health-interval positive")
    for url in args.backends:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CLIError(f"{url}: a backend is an http:// or https:// address")
    if len(set(u.rstrip("/") for u in args.backends)) != len(args.backends):
        raise CLIError("a backend is named twice")
    return replace(ROUTE, prefix_chars=args.prefix_chars, load_factor=args.load_factor,
                   health_interval=args.health_interval)


def build_app(args):
    from ..route.app import create_app
    from .serve import guard_settings
    return create_app([u.rstrip("/") for u in args.backends], settings(args), guard_settings(args))


def run(args):
    import uvicorn

    from .serve import listen
    app = build_app(args)
    sock = listen(args.host, args.port)
    eprint(f"llamay: routing http://{args.host}:{args.port} over {', '.join(args.backends)}")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
