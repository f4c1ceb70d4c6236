"""Decode and prefill on a quiet machine and beside busy processes, interleaved, in one run, for llamay and
(with --llama-bench) llama.cpp on the same file:

    python bench/contention.py [-m MODEL] [--busy 0,1,2] [-t 2] [--rounds 3] [--llama-bench PATH]

Each round runs every (busy processes, engine, threads) case once; the medians follow, with each case's
ratio to the quiet figure of the same engine and thread count (a fair share of 2 cores for 3 runnable
threads is 0.67). `--busy 0,1,2` covers quiet, one busy process and a load average near 4 on 2 cores;
`--busy 0,6 -t 2,1` the load-average-6-8 case, where 2 threads must not fall below 1."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402


def llamay_case(model, threads, prefill, decode) -> dict:
    cmd = [sys.executable, "-m", "llamay.cli.main", "bench", "-t", str(threads), "--prefill", str(prefill),
           "--decode", str(decode), "-r", "3", "--json"]
    if model:
        cmd += ["-m", model]
    res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    return {"pp": res["prefill_tok_s"], "tg": res["decode_tok_s"]}


def llamacpp_case(exe, model, threads, prefill, decode) -> dict:
    out = subprocess.run([exe, "-m", model, "-t", str(threads), "-p", str(prefill), "-n", str(decode), "-r", "3",
                          "-o", "json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    return {"pp": next(r["avg_ts"] for r in rows if r["n_prompt"]), "tg": next(r["avg_ts"] for r in rows if r["n_gen"])}


def with_busy(n: int, run):
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        return run()
    finally:
        for p in busy:
            p.kill()
            p.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", default=None)
    p.add_argument("-t", "--threads", default="2", help="thread counts, comma-separated")
    p.add_argument("--busy", default="0,1", help="busy processes beside the engine, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prefill", type=int, default=128)
    p.add_argument("--decode", type=int, default=64)
    p.add_argument("--llama-bench", help="path of llama.cpp's llama-bench, to run it beside llamay")
    args = p.parse_args()
    if args.llama_bench and not args.model:
        from llamay.defaults import default_model_path
        args.model = str(default_model_path())
    print(machine.describe())
    print(f"model: {args.model or 'default'}")
    engines = {"llamay": lambda t: llamay_case(args.model, t, args.prefill, args.decode)}
    if args.llama_bench:
        engines["llama.cpp"] = lambda t: llamacpp_case(args.llama_bench, args.model, t, args.prefill, args.decode)
    cases = [(b, e, t) for b in map(int, args.busy.split(",")) for e in engines for t in map(int, args.threads.split(","))]
    runs = {c: [] for c in cases}
    for r in range(args.rounds):
        for c in cases:
            busy, engine, threads = c
            res = with_busy(busy, lambda: engines[engine](threads))
            runs[c].append(res)
            print(f"round {r + 1}: busy {busy} {engine:9s} -t {threads}: prefill {res['pp']:7.1f} tok/s  "
                  f"decode {res['tg']:6.1f} tok/s")
    print("medians:")
    for c in cases:
        busy, engine, threads = c
        med = {k: statistics.median(x[k] for x in runs[c]) for k in ("pp", "tg")}
        quiet = runs.get((0, engine, threads))
        ratio = ""
        if quiet and busy:
            q = {k: statistics.median(x[k] for x in quiet) for k in ("pp", "tg")}
            ratio = f"   of quiet: prefill {med['pp'] / q['pp']:.2f}  decode {med['tg'] / q['tg']:.2f}"
        print(f"  busy {busy} {engine:9s} -t {threads}: prefill {med['pp']:7.1f}  decode {med['tg']:6.1f}{ratio}")
    print(f"after: {machine.load()}")


if __name__ == "__main__":
    main()
