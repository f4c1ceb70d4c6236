"""`llamay quantize` against llama.cpp's llama-quantize on the same input, file types and threads: seconds,
interleaved, medians and the ratio; and whether the two outputs are the same bytes.
usage: python bench/quantize.py --llama-quantize PATH [--model F16.gguf] [--types Q4_K_M Q8_0] [--threads 2]
    [--reps 3]
Without --model the default model is requantized to F16 first (by llamay) and that file is the input."""
import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

from llamay.defaults import default_model_path  # noqa: E402
from llamay.quantize import quantize  # noqa: E402


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-quantize", required=True)
    ap.add_argument("--model")
    ap.add_argument("--types", nargs="+", default=["Q4_K_M", "Q8_0", "Q6_K"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(machine.describe(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = Path(args.model) if args.model else tmp / "input-f16.gguf"
        if not args.model:
            quantize(default_model_path(), src, "F16", allow_requantize=True, threads=args.threads)
        print(f"input: {src.name} ({src.stat().st_size / 2**20:.0f} MiB)")
        for t in args.types:
            ours, theirs = tmp / f"llamay-{t}.gguf", tmp / f"llamacpp-{t}.gguf"

            def run_ours():
                t0 = time.perf_counter()
                quantize(src, ours, t, threads=args.threads)
                return time.perf_counter() - t0

            def run_theirs():
                t0 = time.perf_counter()
                subprocess.run([args.llama_quantize, str(src), str(theirs), t, str(args.threads)], check=True,
                               capture_output=True)
                return time.perf_counter() - t0
            got = {"llamay": [], "llama.cpp": []}
            for _ in range(args.reps):  # interleaved: both see the same machine
                got["llamay"].append(run_ours())
                got["llama.cpp"].append(run_theirs())
            med = {k: statistics.median(v) for k, v in got.items()}
            same = sha(ours) == sha(theirs)
            print(f"{t:7s} llamay {med['llamay']:6.2f} s  llama-quantize {med['llama.cpp']:6.2f} s  "
                  f"speed llamay/llama.cpp {med['llama.cpp'] / med['llamay']:.2f}x  same bytes: {same}  "
                  f"(runs: {', '.join(f'{x:.2f}' for x in got['llamay'])} | "
                  f"{', '.join(f'{x:.2f}' for x in got['llama.cpp'])})")
    print(machine.load())


if __name__ == "__main__":
    main()
