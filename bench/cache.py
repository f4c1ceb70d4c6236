"""The prefix cache's disk tier: time to first token of a long prompt seen before, read back from disk after
a restart, against prefilling it; and the logits (==).

Per model: a prompt of --tokens tokens is computed once (its pages written to the tier), then, interleaved,
--reps times each: prefill (the model with nothing cached), disk (the same model after a restart: memory
empty, the tier's files in the OS page cache), disk-cold (the tier's files first dropped from the page
cache with posix_fadvise, as after a reboot) and shared (a second server's model, memory empty and no disk
tier, reading the pages the first published to a redis-server on loopback, started here when installed). Time to first token = one generated token, from the request
to it. Also one true restart: a new process loads the model and answers the prompt once.

--serve: the same through real `llamay serve` processes (issue 32's case), a request to /completion of the
prompt's token ids (greedy) in rounds of: a server without tiers (cold prefill); a server restarted on a
--cache-dir a first server filled (disk); a second server with --cache-redis only, on the Redis that first
server published to (shared). Each server's model is loaded by a 1-token request first; the figure is the
time to the first token of the long prompt at the client, the restarted server's first request of it; then
8 tokens of it must be the same every way (asserted). --baseline SRC: every round also runs servers from
the source tree SRC (PYTHONPATH), as `kind@base`, for before/after ratios under the same load.

usage: python bench/cache.py [MODEL.gguf ...] [--threads 2] [--reps 5] [--tokens 2000] [--serve]
Default model: Gemma 3 270M (the issue's target), then SmolLM2-135M."""
from __future__ import annotations

import argparse
import json
import os
import signal
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402
from models import gemma_path, smollm_path  # noqa: E402

import llamay  # noqa: E402
from llamay.kv.disk import SUFFIX  # noqa: E402

GB = 1 << 30
ONE = """
import sys, time, llamay
llm = llamay.load(sys.argv[1], threads=int(sys.argv[2]), n_ctx=4096, cache_disk=int(sys.argv[4]), cache_dir=sys.argv[3])
ids = [int(t) for t in open(sys.argv[5]).read().split()]
t = time.perf_counter()
list(llm.generate(ids, max_tokens=1, temperature=0))
print(time.perf_counter() - t, llm.stats.disk_tokens)
"""


def long_prompt(llm, n: int) -> list[int]:
    words = ("harbor library copper signal winter garden lamp river stone market cloud engine paper violet "
             "thunder silver meadow candle anchor orange ladder").split()
    rng = np.random.default_rng(0)
    text = " ".join(f"{rng.choice(words)}" + ("." if i % 11 == 10 else "") for i in range(4 * n))
    return llm.tokenize(text)[:n]


def ttft(llm, ids: list[int]) -> tuple[float, int]:
    """-> (seconds to the first token, tokens read from a tier)."""
    llm.reset()
    t = time.perf_counter()
    list(llm.generate(ids, max_tokens=1, temperature=0))
    return time.perf_counter() - t, llm.stats.disk_tokens + llm.stats.shared_tokens


def drop_page_cache(folder: Path):
    for f in folder.rglob("*" + SUFFIX):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def redis_server():
    """(url, process) of a redis-server (or valkey-server) on a free loopback port, or (None, None)."""
    exe = shutil.which("redis-server") or shutil.which("valkey-server")
    if exe is None:
        return None, None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    return f"redis://127.0.0.1:{port}/0", proc


def bench(path, threads: int, reps: int, n: int, redis_url: str | None):
    with tempfile.TemporaryDirectory() as folder:
        plain = llamay.load(path, threads=threads, n_ctx=4096)
        disk = llamay.load(path, threads=threads, n_ctx=4096, cache_disk=4 * GB, cache_dir=folder)
        ids = long_prompt(plain, n)
        want = plain.eval_last(ids)
        disk.eval_last(ids)
        disk.cache.flush()
        disk.reset()
        got = disk.eval_last(ids)
        same = np.array_equal(got, want)
        read = disk.stats.disk_tokens
        kinds = ["prefill", "disk", "disk-cold"]
        if redis_url:
            shared = llamay.load(path, threads=threads, n_ctx=4096, cache_redis=redis_url)
            publisher = llamay.load(path, threads=threads, n_ctx=4096, cache_redis=redis_url)
            publisher.eval_last(ids)
            publisher.cache.flush()
            same = same and np.array_equal(shared.eval_last(ids), want) and shared.stats.shared_tokens > 0
            kinds.append("shared")
        times = {k: [] for k in kinds}
        for rep in range(reps + 1):
            for kind in kinds if rep % 2 else kinds[::-1]:
                if kind == "disk-cold":
                    drop_page_cache(Path(folder))
                llm = {"prefill": plain, "shared": shared if redis_url else None}.get(kind, disk)
                t, n_read = ttft(llm, ids)
                assert (n_read > 0) == (kind != "prefill"), (kind, n_read)
                if rep:  # the first round warms up (graphs built)
                    times[kind].append(t)
        med = {k: statistics.median(v) for k, v in times.items()}
        page_mb = disk.cache.disk.bytes / disk.cache.disk.n_pages / 1e6
        print(f"\n{Path(path).name}: {threads} threads, a {len(ids)}-token prompt, {read} tokens read from disk "
              f"({disk.cache.disk.n_pages} pages of {page_mb:.2f} MB), logits equal: {same}")
        for k, v in med.items():
            print(f"  time to first token, {k:9}: {v * 1e3:8.1f} ms  ({med['prefill'] / v:5.1f}x faster than prefill)")
        restart = {}
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(" ".join(map(str, ids)))
        for kind, budget in (("prefill", 0), ("disk", 4 * GB)):
            out = subprocess.run([sys.executable, "-c", ONE, str(path), str(threads), folder, str(budget), f.name],
                                 capture_output=True, text=True, check=True).stdout.split()
            restart[kind] = float(out[0])
        os.unlink(f.name)
        print(f"  a new process's first request: prefill {restart['prefill'] * 1e3:.1f} ms, from disk "
              f"{restart['disk'] * 1e3:.1f} ms ({restart['prefill'] / restart['disk']:.1f}x)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


class Server:
    """A `llamay serve` process of path with these extra flags, up and its model loaded."""

    def __init__(self, path, threads: int, flags: list[str], src: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-c", "from llamay.cli.main import main; main()", "serve", "-m", str(path),
               "--port", str(self.port), "-t", str(threads), "-c", "4096", "-q", *flags]
        env = dict(os.environ, PYTHONPATH=src) if src else None
        self.proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
        for _ in range(600):
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("llamay serve did not come up")
        self.complete([1], 1)  # loads the model: the figures leave its load out

    def complete(self, ids: list[int], n: int = 8) -> tuple[float, dict]:
        """-> (seconds at the client, the response) of a greedy /completion of ids, n tokens."""
        t = time.perf_counter()
        out = post(self.url + "/completion", {"prompt": ids, "n_predict": n, "temperature": 0,
                                              "return_tokens": True, "cache_prompt": True})
        return time.perf_counter() - t, out

    def stop(self):
        """SIGINT, as an operator's restart: the tiers' writer flushes at exit."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)


def bench_serve(path, threads: int, reps: int, n: int, redis_url: str, baseline: str | None):
    import redis
    ids = long_prompt(llamay.load(path, threads=1, n_ctx=256), n)
    srcs = {"": None, **({"@base": baseline} if baseline else {})}
    times, outs = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        fill = Server(path, threads, ["--cache-disk", "4G", "--cache-dir", folder, "--cache-redis", redis_url])
        _, first = fill.complete(ids)
        fill.stop()
        flags = {"prefill": ["--cache-disk", "0"], "disk": ["--cache-disk", "4G", "--cache-dir", folder],
                 "shared": ["--cache-disk", "0", "--cache-redis", redis_url]}
        runs = [(kind, tag) for tag in srcs for kind in flags]
        for rep in range(reps):
            for kind, tag in runs if rep % 2 == 0 else runs[::-1]:
                server = Server(path, threads, flags[kind], srcs[tag])
                try:
                    t, out = server.complete(ids, 1)
                    _, more = server.complete(ids, 8)  # from memory now: what the tier's pages gave
                finally:
                    server.stop()
                read = out["timings"].get("cache_n_disk" if kind == "disk" else "cache_n_shared", 0)
                assert (read > 0) == (kind != "prefill"), (kind, tag, out["timings"])
                assert more["tokens"] == first["tokens"] and out["tokens"] == first["tokens"][:1], (kind, tag, more)
                times.setdefault(kind + tag, []).append(t)
                outs[kind + tag] = (read, out["timings"]["prompt_n"])
    n_keys = redis.Redis.from_url(redis_url).dbsize()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{Path(path).name} through llamay serve: {threads} threads, a {len(ids)}-token prompt, the same 8 "
          f"tokens every way: {first['tokens']}; {reps} rounds, medians of the time to the first token "
          f"(Redis keys: {n_keys})")
    for k, v in med.items():
        read, computed = outs[k]
        cold = med["prefill" + k[k.index("@"):] if "@" in k else "prefill"]
        print(f"  {k:13}: {v * 1e3:8.1f} ms  ({cold / v:5.1f}x faster than its prefill; {read} tokens read, "
              f"{computed} computed)  all: {' '.join(f'{x * 1e3:.0f}' for x in times[k])}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--serve", action="store_true", help="through llamay serve processes (restarts, Redis)")
    ap.add_argument("--baseline", metavar="SRC", help="--serve: servers from this source tree too, for ratios")
    args = ap.parse_args()
    models = args.models
    if not models:
        try:
            models = [gemma_path()]
        except ImportError:
            print("Gemma 3 270M not installed: SmolLM2 alone")
        models.append(smollm_path())
    print(machine.describe(args.threads))
    url, proc = redis_server()
    print(f"shared tier: {url}" if url else "shared tier: skipped (no redis-server or valkey-server)")
    try:
        for path in models:
            if args.serve:
                assert url, "--serve needs redis-server or valkey-server"
                bench_serve(path, args.threads, args.reps, args.tokens, url, args.baseline)
            else:
                bench(path, args.threads, args.reps, args.tokens, url)
    finally:
        if proc is not None:
            proc.kill()
    print(f"\nafter: {machine.load()}")


if __name__ == "__main__":
    main()
