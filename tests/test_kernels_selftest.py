"""The C core's Python-free self-test (tests/csrc/selftest.c through scripts/cross_test.sh): every kernel path
against the portable one byte for byte, natively on the library the package loaded, and cross-built for arm64
under qemu-aarch64 -cpu max with each arm64 path forced (skipped, saying why, without the cross compiler or
qemu: `apt-get install gcc-aarch64-linux-gnu qemu-user`)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from llamay.kernels import _lib

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "cross_test.sh"


def run(*args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_every_native_path_gives_the_portable_bytes():
    if not shutil.which("cc"):
        pytest.skip("no C compiler (cc) to build the self-test")
    out = run("native", _lib._find_library())
    for path in _lib.available()[1:]:
        assert f"{path}: identical" in out, out
    assert "DIFFERENT" not in out


def test_every_arm64_path_under_qemu_gives_the_portable_bytes():
    missing = [tool for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (apt-get install gcc-aarch64-linux-gnu qemu-user)")
    out = run("aarch64")
    assert "qemu -cpu max: paths this CPU runs: portable neon dotprod i8mm" in out, out
    for path in ("neon", "dotprod", "i8mm"):
        assert f"{path}: identical" in out, out
    for kernel in ("tile:Q4_0", "tile:Q8_0", "tile:Q4_K", "tile:Q6_K", "attention:f16/f16"):
        assert kernel in out, out
    assert "DIFFERENT" not in out
