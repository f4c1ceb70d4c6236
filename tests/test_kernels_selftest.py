"""The C core's Python-free checks (scripts/cross_test.sh): tests/csrc/selftest.c compares every kernel path
with the portable one byte for byte, natively on the library the package loaded and cross-built for arm64 under
qemu-aarch64 (each arm64 path forced); tests/csrc/tiny_logits.c's logits digest must be one value on every
path of both architectures. The arm64 runs skip, saying why, without the cross compiler or qemu
(`apt-get install gcc-aarch64-linux-gnu qemu-user`); the Windows build (MinGW-w64, run under Wine) without
those (`apt-get install gcc-mingw-w64-x86-64 wine64`; .ci/run does not install them: a minute more)."""
import re
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


def digests(out: str) -> dict[str, str]:
    """{'<path>, <n> thread(s)': the logits' digest}"""
    return dict(re.findall(r"^(\w+, \d thread\(s\)): ([0-9a-f]{16})$", out, flags=re.M))


@pytest.fixture(scope="module")
def native() -> str:
    if not shutil.which("cc"):
        pytest.skip("no C compiler (cc) to build the self-test")
    return run("native", _lib._find_library())


@pytest.fixture(scope="module")
def arm64() -> str:
    missing = [tool for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (apt-get install gcc-aarch64-linux-gnu qemu-user)")
    return run("aarch64")


@pytest.fixture(scope="module")
def windows() -> str:
    wine = shutil.which("wine64") or next((p for p in ["/usr/lib/wine/wine64"] if Path(p).exists()), None)
    if not (shutil.which("x86_64-w64-mingw32-gcc") and wine):
        pytest.skip("no MinGW-w64 cross compiler or Wine (apt-get install gcc-mingw-w64-x86-64 wine64)")
    return run("windows")


def test_every_native_path_gives_the_portable_bytes(native):
    for path in _lib.available()[1:]:
        assert f"{path}: identical" in native, native
    assert "DIFFERENT" not in native
    assert {key.split(",")[0] for key in digests(native)} == set(_lib.available())
    assert len(set(digests(native).values())) == 1, native


def test_every_arm64_path_under_qemu_gives_the_portable_bytes(arm64):
    assert "qemu -cpu max: paths this CPU runs: portable neon dotprod i8mm" in arm64, arm64
    for path in ("neon", "dotprod", "i8mm"):
        assert f"{path}: identical" in arm64, arm64
    for kernel in ("tile:Q4_0", "tile:Q8_0", "tile:Q4_K", "tile:Q6_K", "quant_row", "attention:f16/f16"):
        assert kernel in arm64, arm64
    assert "DIFFERENT" not in arm64


def test_tiny_model_logits_are_the_same_bits_on_x86_64_and_arm64(native, arm64):
    both = {**{f"native {k}": v for k, v in digests(native).items()},
            **{f"arm64 {k}": v for k, v in digests(arm64).items()}}
    assert len(both) == 2 * len(_lib.available()) + 8 and len(set(both.values())) == 1, both


def test_the_windows_build_gives_the_same_bytes_under_wine(native, windows):
    assert "avx2: identical" in windows and "DIFFERENT" not in windows, windows
    assert set(digests(windows).values()) == set(digests(native).values()), (windows, native)
