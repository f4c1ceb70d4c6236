"""The real engine on arm64 (scripts/arm64_python.sh): SmolLM2's and Gemma 3 270M's logits (a prefill and
three decode steps) from Debian's arm64 CPython 3.11 under qemu-aarch64 -cpu max, on every arm64 path (portable,
neon, dotprod, i8mm) at 1 and 2 threads, are the x86-64 build's on every path this CPU runs, bit for bit: one
digest per model. The first run downloads about 35 MB into the test cache (Debian's arm64 python3.11 and the
libraries it loads from deb.debian.org; numpy, regex and xxhash aarch64 wheels from PyPI); a cached run takes
about 2.5 CPU-minutes (5-6 minutes on a busy shared 2-core machine), nearly all of it the arm64 side.
Skips, saying why, without the cross compiler or qemu (.ci/run installs both)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import llamay
from llamay.kernels import _lib

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "arm64_python.sh"
ARM64_PATHS = ("portable", "neon", "dotprod", "i8mm")
RUN = re.compile(r"^(x86-64|arm64 \(qemu\)) (\S+) (\w+), (\d) thread\(s\): ([0-9a-f]{16})$", re.M)


def test_real_models_give_the_same_logits_bits_on_arm64_under_qemu(smollm_path, gemma_path):
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": str(Path(llamay.__file__).parent.parent)}  # the llamay under test, on both sides
    done = subprocess.run([str(SCRIPT), str(smollm_path), str(gemma_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode == 3:
        pytest.skip(f"{done.stderr.strip()} (apt-get install gcc-aarch64-linux-gnu qemu-user)")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = RUN.findall(done.stdout)
    want = ({("x86-64", path, n) for path in _lib.available() for n in "12"}
            | {("arm64 (qemu)", path, n) for path in ARM64_PATHS for n in "12"})
    for model in (smollm_path, gemma_path):
        mine = [run for run in runs if run[1] == model.stem]
        assert {run[0:1] + run[2:4] for run in mine} == want and len(mine) == len(want), done.stdout
        assert len({run[4] for run in mine}) == 1, done.stdout
