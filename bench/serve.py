"""`llamay serve` under load: batching gain, multi-turn agent reuse, and a mixed 200-request load.

    python bench/serve.py batching [--clients 8] [--tokens 64] [--llamacpp]
    python bench/serve.py agent [--conversations 3] [--turns 6] [--kv-budget 48M --cache-disk 2G]
    python bench/serve.py load [--requests 200] [--concurrency 16] [--server-queue 4]

The server runs in this process (so the load test can check the state engine's invariants afterwards);
clients are threads speaking raw HTTP. --llamacpp also runs llama-cpp-python's server (a subprocess) on
the same file with the same clients."""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from llamay.defaults import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_thread import ServerThread  # noqa: E402

TOPICS = ["the sea", "a mountain", "the moon", "a city at night", "autumn leaves", "a quiet library",
          "the desert", "a train journey", "winter", "a garden"]


def sse_chat(url: str, model: str, messages: list[dict], max_tokens: int, timeout: float = 600) -> dict:
    """One streamed chat completion -> {ttft, total, text, usage}."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, ttft, text, usage, chunks = time.perf_counter(), None, "", None, 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                piece = choice["delta"].get("content") or ""
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                chunks += bool(piece)
                text += piece
    if usage is None:  # llama-cpp-python's server sends no usage when streaming: one chunk per token
        usage = {"completion_tokens": chunks}
    return {"ttft": ttft, "total": time.perf_counter() - t0, "text": text, "usage": usage}


def _clients(url: str, model: str, n: int, tokens: int) -> tuple[float, int]:
    """n concurrent streaming clients, distinct prompts -> (wall seconds, completion tokens)."""
    prompts = [[{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}] for i in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda m: sse_chat(url, model, m, tokens), prompts))
    wall = time.perf_counter() - t0
    return wall, sum(r["usage"]["completion_tokens"] for r in results)


def batching(args, url: str, model: str) -> dict:
    _clients(url, model, 1, 8)  # warm up
    one_wall, one_tokens = _clients(url, model, 1, args.tokens)
    many_wall, many_tokens = _clients(url, model, args.clients, args.tokens)
    out = {"single_tok_s": one_tokens / one_wall, f"{args.clients}_clients_tok_s": many_tokens / many_wall}
    out["batching_gain"] = out[f"{args.clients}_clients_tok_s"] / out["single_tok_s"]
    if args.llamacpp:
        with LlamaCppServer(args.model, args.threads, args.ctx) as lc:
            _clients(lc.url, "m", 1, 8)
            wall, tokens = _clients(lc.url, "m", args.clients, args.tokens)
            out[f"llamacpp_{args.clients}_clients_tok_s"] = tokens / wall
            out["vs_llamacpp"] = out[f"{args.clients}_clients_tok_s"] / out[f"llamacpp_{args.clients}_clients_tok_s"]
    return out


def agent(args, url: str, model: str) -> dict:
    """Conversations sharing a long system prompt, one more turn per request, interleaved."""
    system = "You are a careful assistant for a shipping company. " + " ".join(
        f"Rule {i}: answer briefly and name the rule you used." for i in range(args.system_rules))
    convs = [[{"role": "system", "content": system}] for _ in range(args.conversations)]
    per_turn = []
    for turn in range(args.turns):
        rows = []
        for c, conv in enumerate(convs):
            conv.append({"role": "user", "content": f"Question {turn} of conversation {c}: where is parcel {turn * 7 + c}?"})
            r = sse_chat(url, model, conv, args.tokens)
            conv.append({"role": "assistant", "content": r["text"]})
            u = r["usage"]
            rows.append((r["ttft"], u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                         u.get("llamay", {}).get("cached_disk_tokens", 0)))
        per_turn.append({"turn": turn, "ttft_ms": 1000 * statistics.mean(x[0] for x in rows),
                         "prompt_tokens": statistics.mean(x[1] for x in rows),
                         "cached_tokens": statistics.mean(x[2] for x in rows),
                         "disk_tokens": statistics.mean(x[3] for x in rows)})
    for row in per_turn:
        print(f"  turn {row['turn']}: ttft {row['ttft_ms']:7.1f} ms  prompt {row['prompt_tokens']:6.0f}  "
              f"cached {row['cached_tokens']:6.0f} (from disk {row['disk_tokens']:6.0f})")
    return {"turns": per_turn, "ttft_first_ms": per_turn[0]["ttft_ms"], "ttft_last_ms": per_turn[-1]["ttft_ms"]}


def _one_request(url: str, model: str, i: int) -> int:
    """A random request over the three APIs; some clients walk away mid-stream. -> HTTP status."""
    rng = random.Random(i)
    kind, n = rng.choice(["openai", "openai-stream", "anthropic", "ollama", "ollama-stream", "abandon"]), rng.randint(1, 24)
    msgs = [{"role": "user", "content": f"Tell me about {rng.choice(TOPICS)}."}]
    if kind.startswith("openai") or kind == "abandon":
        body = {"model": model, "messages": msgs, "max_tokens": n, "stream": kind != "openai"}
        path = "/v1/chat/completions"
    elif kind == "anthropic":
        body, path = {"model": model, "messages": msgs, "max_tokens": n}, "/v1/messages"
    else:
        body = {"model": model, "messages": msgs, "options": {"num_predict": n}, "stream": kind == "ollama-stream"}
        path = "/api/chat"
    with httpx.stream("POST", url + path, json=body, timeout=600) as r:
        for k, _ in enumerate(r.iter_lines()):
            if kind == "abandon" and k == 2:
                break  # closing the response disconnects
        return r.status_code


def load(args, url: str, model: str, server: ServerThread) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        statuses = list(pool.map(lambda i: _one_request(url, model, i), range(args.requests)))
    wall = time.perf_counter() - t0
    deadline = time.monotonic() + 10
    while any(m.scheduler.n_running for m in server.registry.loaded.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    held = server.check_pages()  # raises on a leaked page or a broken invariant
    counts = {str(s): statuses.count(s) for s in sorted(set(statuses))}
    bad = sum(c for s, c in counts.items() if s.startswith("5") and s not in ("503", "529"))
    return {"wall_s": wall, "requests_per_s": args.requests / wall, "statuses": counts, "unexpected_5xx": bad,
            "pages_held_by_contexts_after": held}


class LlamaCppServer:
    """llama-cpp-python's OpenAI server (pip install 'llama-cpp-python[server]') as a subprocess."""

    def __init__(self, model: str, threads: int, n_ctx: int):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(self.port),
                    "--host", "127.0.0.1", "--n_threads", str(threads), "--n_ctx", str(n_ctx), "--model_alias", "m",
                    "--interrupt_requests", "False"]  # else a new request cuts the running stream

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError("llama-cpp-python's server did not start")

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(30)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["batching", "agent", "load"])
    p.add_argument("-m", "--model", default=str(default_model_path()))
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("-c", "--ctx", type=int, default=4096)
    p.add_argument("--server-concurrency", type=int, default=8)
    p.add_argument("--server-queue", type=int, default=64, help="the server's --queue (small: deliberate 503s)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--llamacpp", action="store_true")
    p.add_argument("--conversations", type=int, default=3)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--system-rules", type=int, default=40)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--kv-budget", help="the server's --kv-budget (memory for KV pages)")
    p.add_argument("--cache-disk", default="0", help="the server's --cache-disk (default 0: no disk tier)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    server = ServerThread(["-m", args.model, "-t", str(args.threads), "-c", str(args.ctx),
                           "--concurrency", str(args.server_concurrency), "--queue", str(args.server_queue),
                           "--cache-disk", args.cache_disk, "--cache-dir", tempfile.mkdtemp(prefix="llamay-bench-kv-")]
                          + (["--kv-budget", args.kv_budget] if args.kv_budget else []))  # a fresh disk tier
    try:
        model = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
        if args.mode == "batching":
            out = batching(args, server.url, model)
        elif args.mode == "agent":
            out = agent(args, server.url, model)
        else:
            out = load(args, server.url, model, server)
    finally:
        server.stop()
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            if k != "turns":
                print(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    main()
