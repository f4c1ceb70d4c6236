"""Decode and prefill on a quiet machine and beside busy processes, interleaved, in one run:

    python bench/contention.py [-m MODEL] [--busy 1] [--rounds 3] [-t 2]

Prints the machine, each round's figures and the medians, and the busy/quiet ratio (a fair share of
2 cores for 3 runnable threads is 0.67)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return f"{model}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"


def bench(args, n_busy: int) -> dict:
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n_busy)]
    try:
        cmd = [sys.executable, "-m", "llamay.cli.main", "bench", "-t", str(args.threads), "--prefill",
               str(args.prefill), "--decode", str(args.decode), "-r", "3", "--json"]
        if args.model:
            cmd += ["-m", args.model]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        for p in busy:
            p.kill()
            p.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", default=None)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--busy", type=int, default=1, help="busy processes beside the engine")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prefill", type=int, default=128)
    p.add_argument("--decode", type=int, default=64)
    args = p.parse_args()
    print(machine())
    runs = {"quiet": [], "busy": []}
    for r in range(args.rounds):
        for name, n in (("quiet", 0), ("busy", args.busy)):
            res = bench(args, n)
            runs[name].append(res)
            print(f"round {r + 1} {name:5s}: prefill {res['prefill_tok_s']:7.1f} tok/s  decode {res['decode_tok_s']:6.1f} tok/s")
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("prefill_tok_s", "decode_tok_s")} for k, v in runs.items()}
    for f in ("prefill_tok_s", "decode_tok_s"):
        print(f"median {f}: quiet {med['quiet'][f]:.1f}, busy {med['busy'][f]:.1f}, "
              f"ratio {med['busy'][f] / med['quiet'][f]:.2f}")


if __name__ == "__main__":
    main()
