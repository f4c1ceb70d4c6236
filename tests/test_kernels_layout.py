"""The C kernels' dispatch rule (csrc/dispatch.c's top comment), checked on the sources: ISA code only in
units named for their ISA, wholly under #if LY_X86 (x86-64) or #if LY_ARM64 (arm64); intrinsics headers
included only there; every ISA choice through the kernel table, never a CPU flag read at call time."""
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "src" / "llamay" / "kernels" / "csrc"
X86_UNIT = re.compile(r"_(avx2|avxvnni|avx512)\.c$")
ARM_UNIT = re.compile(r"_(neon|dotprod|i8mm)\.c$")
INCLUDE = re.compile(r'^#include [<"]([^>"]+)[>"]', re.M)
INTRINSICS = re.compile(r"\b_mm\w*|\b__m\d+\w*|\bLY_AVX\w*"  # x86
                        r"|\b(?:u?int|float|poly)\d+x\d+(?:x\d)?_t\b|\bv\w+q?_[sufp]\d+\b|\bLY_(?:NEON|DOTPROD|I8MM)\b")


def isa_headers() -> set[str]:
    """The headers that bring intrinsics in, directly or through another."""
    found = {"immintrin.h", "x86.h", "arm_neon.h", "arm.h"}
    while True:
        more = {h.name for h in CSRC.glob("*.h") if set(INCLUDE.findall(h.read_text())) & found} - found
        if not more:
            return found
        found |= more


def test_generic_files_hold_portable_c_only():
    bad = []
    for path in sorted(CSRC.glob("*.c")):
        if X86_UNIT.search(path.name) or ARM_UNIT.search(path.name):
            continue
        text = path.read_text()
        bad += [f"{path.name} includes {h}" for h in INCLUDE.findall(text) if h in isa_headers()]
        bad += [f"{path.name} uses {m}" for m in set(INTRINSICS.findall(text))]
        if path.name != "dispatch.c":  # only the table's home names a path's entries
            calls = r"\b\w+_(?:avx2|avxvnni|avx512|neon|dotprod|i8mm)(?=\s*\()"
            bad += [f"{path.name} calls {m}" for m in set(re.findall(calls, text))]
    assert not bad, bad


def test_isa_units_compile_only_for_their_isa():
    for path in sorted(CSRC.glob("*.c")):
        guard = "#if LY_X86" if X86_UNIT.search(path.name) else "#if LY_ARM64" if ARM_UNIT.search(path.name) else None
        if guard:
            code = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S).strip().splitlines()
            assert code[:2] == ['#include "common.h"', guard] and code[-1] == "#endif", path.name


def test_isa_headers_only_in_their_units():
    x86, arm = {"immintrin.h", "x86.h"}, {"arm_neon.h", "arm.h"}
    for path in sorted(CSRC.glob("*.[ch]")):
        included = set(INCLUDE.findall(path.read_text()))
        if X86_UNIT.search(path.name):
            assert not included & arm, path.name
        if ARM_UNIT.search(path.name):
            assert not included & x86, path.name


def test_no_kernel_reads_cpu_flags():
    flags = re.compile(r"\bly_(avx2|avxvnni|avx512|vnni256|neon|dotprod|i8mm)\b(?!\.)")
    assert not [p.name for p in CSRC.glob("*.[ch]") if flags.search(p.read_text())]
