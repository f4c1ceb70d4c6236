"""The machine a benchmark ran on: CPU model, cores, SIMD flags, kernel path, load, memory-read bandwidth.
Every benchmark prints this first, so figures from different machines are never compared."""
import functools
import os
import re
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_int8")


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.M).group(1).split()) if "flags" in info else set()
    have = [f for f in FLAGS if f in flags]
    return f"{model.group(1) if model else 'unknown CPU'}, {os.cpu_count()} CPUs, flags: {' '.join(have) or 'none'}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


@functools.lru_cache(maxsize=None)
def read_bandwidth(threads: int) -> float:
    """GB/s reading a 1 GiB buffer with `threads` threads (bench/bandwidth.c, built here with gcc)."""
    src = Path(__file__).with_name("bandwidth.c")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "bandwidth"
        subprocess.run(["gcc", "-O2", "-mavx2", "-fopenmp", str(src), "-o", str(exe)], check=True)
        return float(subprocess.run([str(exe), str(threads)], check=True, capture_output=True,
                                    text=True).stdout.split()[0])


def describe(threads: int | None = None) -> str:
    from llamay.kernels import _lib
    line = f"machine: {cpu()}\nkernels: {_lib.current()} (this CPU runs: {', '.join(_lib.available())}); {load()}"
    if threads:
        line += f"\nmemory read: {read_bandwidth(threads):.1f} GB/s with {threads} threads"
    return line


def kernel_choice() -> str:
    """How the kernel path in use was chosen: by measurement at the first model load (pathpick.py), each
    path's time relative to the fastest, or by LLAMAY_KERNELS / flags."""
    from llamay.kernels import _lib, pathpick
    got = pathpick.choice()
    if not got:
        return f"kernels: {_lib.current()} (not measured: LLAMAY_KERNELS set, or one path runs)"
    rel = ", ".join(f"{p} {t:.2f}" for p, t in sorted(pathpick.relative_times().items(), key=lambda kv: kv[1]))
    return f"kernels: {_lib.current()}, chosen by measurement on {', '.join(got['types'])} (time relative to the best: {rel})"


if __name__ == "__main__":
    print(describe(1))
    print(f"memory read: {read_bandwidth(2):.1f} GB/s with 2 threads")
