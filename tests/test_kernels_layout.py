"""The C kernels' dispatch rule (csrc/dispatch.c's top comment), checked on the sources: ISA code only in
units named for their ISA, wholly under #if LY_X86; intrinsics headers included only there; every ISA
choice through the kernel table, never a CPU flag read at call time."""
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "src" / "llamay" / "kernels" / "csrc"
ISA_UNIT = re.compile(r"_(avx2|avxvnni|avx512)\.c$")
INCLUDE = re.compile(r'^#include [<"]([^>"]+)[>"]', re.M)


def x86_headers() -> set[str]:
    """The headers that bring intrinsics in, directly or through another."""
    found = {"immintrin.h", "x86.h"}
    while True:
        more = {h.name for h in CSRC.glob("*.h") if set(INCLUDE.findall(h.read_text())) & found} - found
        if not more:
            return found
        found |= more


def test_generic_files_hold_portable_c_only():
    bad = []
    for path in sorted(CSRC.glob("*.c")):
        if ISA_UNIT.search(path.name):
            continue
        text = path.read_text()
        bad += [f"{path.name} includes {h}" for h in INCLUDE.findall(text) if h in x86_headers()]
        bad += [f"{path.name} uses {m}" for m in set(re.findall(r"\b_mm\w*|\b__m\d+\w*|\bLY_AVX\w*", text))]
        if path.name != "dispatch.c":  # only the table's home names a path's entries
            bad += [f"{path.name} calls {m}" for m in set(re.findall(r"\b\w+_(?:avx2|avxvnni|avx512)(?=\s*\()", text))]
    assert not bad, bad


def test_isa_units_compile_only_on_x86():
    for path in sorted(CSRC.glob("*.c")):
        if ISA_UNIT.search(path.name):
            code = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S).strip().splitlines()
            assert code[:2] == ['#include "common.h"', "#if LY_X86"] and code[-1] == "#endif", path.name


def test_no_kernel_reads_cpu_flags():
    flags = re.compile(r"\bly_(avx2|avxvnni|avx512|vnni256)\b(?!\.)")
    assert not [p.name for p in CSRC.glob("*.[ch]") if flags.search(p.read_text())]
