"""The prefix cache's disk tier: time to first token of a long prompt seen before, read back from disk after
a restart, against prefilling it; and the logits (==).

Per model: a prompt of --tokens tokens is computed once (its pages written to the tier), then, interleaved,
--reps times each: prefill (the model with nothing cached), disk (the same model after a restart: memory
empty, the tier's files in the OS page cache), disk-cold (the tier's files first dropped from the page
cache with posix_fadvise, as after a reboot) and shared (a second server's model, memory empty and no disk
tier, reading the pages the first published to a redis-server on loopback, started here when installed). Time to first token = one generated token, from the request
to it. Also one true restart: a new process loads the model and answers the prompt once.

usage: python bench/cache.py [MODEL.gguf ...] [--threads 2] [--reps 5] [--tokens 2000]
Default model: Gemma 3 270M (the issue's target), then SmolLM2-135M."""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2000)
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
            bench(path, args.threads, args.reps, args.tokens, url)
    finally:
        if proc is not None:
            proc.kill()
    print(f"\nafter: {machine.load()}")


if __name__ == "__main__":
    main()
