"""llamay ps | stop NAME: the models loaded in a running `llamay serve`, as `ollama ps` / `ollama stop`.

They talk to the server over its Ollama API: --host, else LLAMAY_HOST, else serve's default address; the
API key from LLAMAY_API_KEY when the server wants one."""
from __future__ import annotations

import datetime

from .. import env
from ..settings import SERVER
from .common import CLIError, Command, table
from .store_cmds import human_bytes, human_time

TIMEOUT_S = 10.0


def server_url(host: str | None) -> str:
    """host:port, a bare host (serve's port), or a URL -> the server's base URL."""
    text = (host or env.host() or f"{SERVER.host}:{SERVER.port}").strip().rstrip("/")
    if "://" not in text:
        text = "http://" + text
    scheme, _, rest = text.partition("://")
    if ":" not in rest.rsplit("]", 1)[-1]:
        text = f"{scheme}://{rest}:{SERVER.port}"
    return text


def _call(args, method: str, path: str, body: dict | None = None) -> dict:
    import httpx
    url = server_url(args.host)
    key = env.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.request(method, url + path, json=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.ConnectError:
        raise CLIError(f"no server at {url} (llamay serve starts one; --host or LLAMAY_HOST points elsewhere)") from None
    except httpx.HTTPError as e:
        raise CLIError(f"{url}: {e or type(e).__name__}") from None
    try:
        data = r.json()
    except ValueError:
        raise CLIError(f"{url}{path}: HTTP {r.status_code}, not a JSON answer (is it llamay or Ollama?)") from None
    if r.status_code != 200:
        error = data.get("error") if isinstance(data, dict) else None
        raise CLIError(str(error.get("message") if isinstance(error, dict) else error or f"HTTP {r.status_code}"))
    return data


def _add_host(p):
    p.add_argument("--host", default=None,
                   help=f"the server, host:port or a URL (default: LLAMAY_HOST, else {SERVER.host}:{SERVER.port})")


def add_ps_parser(p):
    _add_host(p)


def _until(expires_at: str) -> str:
    when = datetime.datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    if when.year > 9000:  # Go's now + MaxInt64: kept loaded for ever
        return "Forever"
    return human_time(when.timestamp())


def run_ps(args):
    rows = [("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL")]
    for m in _call(args, "GET", "/api/ps").get("models", []):
        rows.append((m["name"], m["digest"][:12], human_bytes(m["size"]), "100% CPU", str(m.get("context_length", "")),
                     _until(m["expires_at"])))
    print(table(rows))


def add_stop_parser(p):
    p.add_argument("name", help="a model loaded in the server (llamay ps)")
    _add_host(p)


def run_stop(args):
    loaded = [m["name"] for m in _call(args, "GET", "/api/ps").get("models", [])]
    if args.name not in loaded and f"{args.name}:latest" not in loaded:
        raise CLIError(f"{args.name} is not loaded (loaded: {', '.join(loaded) or 'none'})")
    _call(args, "POST", "/api/generate", {"model": args.name, "keep_alive": 0})


PS = Command("List the models loaded in a running server.", add_ps_parser, run_ps)
STOP = Command("Unload a model from a running server.", add_stop_parser, run_stop)
