"""Two checkouts of llamay timed side by side: `llamay bench --json` of each on the same files, interleaved
round by round (A B, B A, ...), so a refactor's before and after meet the same machine load; with
--llama-bench, llama.cpp's llama-bench on the same files in every round too (compare_llamacpp.py's runner).

    python bench/revisions.py BEFORE_DIR AFTER_DIR [--rounds 5] [--prefill 512 --decode 128] [-t 2]
                              [--llama-bench PATH]

Each DIR is a checkout with its C library built in place (`python setup.py build_ext --inplace`); the files
are SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M (bench/models.py). Prints the machine, every round, and the
medians with after / before."""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402
from compare_llamacpp import llama_bench_runner  # noqa: E402
from models import gemma_path, smollm_path  # noqa: E402


def bench(checkout: Path, model: Path, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    cmd = [sys.executable, "-m", "llamay.cli.main", "bench", "-m", str(model), "--json", "-r", "1",
           "--prefill", str(args.prefill), "--decode", str(args.decode)] + (["-t", str(args.threads)] if args.threads else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("--llama-bench", default=None, help="llama.cpp's llama-bench, timed in the same rounds")
    args = p.parse_args()
    print(machine.describe(args.threads))
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, model in (("SmolLM2-135M Q4_1", smollm_path()), ("Gemma 3 270M Q4_K_M", gemma_path())):
        names = list(sides) + (["llama.cpp"] if args.llama_bench else [])
        got = {side: {"prefill": [], "decode": []} for side in names}
        ref = llama_bench_runner(args.llama_bench, model, args.threads or 2) if args.llama_bench else None
        for r in range(args.rounds):
            for side in (names if r % 2 == 0 else names[::-1]):
                if side == "llama.cpp":
                    res = {"prefill_tok_s": ref["pp"](), "decode_tok_s": ref["tg"]()}
                else:
                    res = bench(sides[side], model, args)
                got[side]["prefill"].append(res["prefill_tok_s"])
                got[side]["decode"].append(res["decode_tok_s"])
                print(f"  {name} round {r} {side}: prefill {res['prefill_tok_s']:.1f} decode {res['decode_tok_s']:.1f} tok/s",
                      flush=True)
        for what in ("prefill", "decode"):
            a, b = (statistics.median(got[s][what]) for s in ("before", "after"))
            line = f"{name} {what}: before {a:.1f}  after {b:.1f} tok/s  after/before {b / a:.3f}"
            if ref:
                c = statistics.median(got["llama.cpp"][what])
                line += f"  llama.cpp {c:.1f} tok/s  after/llama.cpp {b / c:.2f}"
            print(line)
    print(machine.load())


if __name__ == "__main__":
    main()
