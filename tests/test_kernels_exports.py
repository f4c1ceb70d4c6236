"""The core's exports: on Windows the DLL exports only the functions marked LY_API (csrc/common.h), while a
Linux or macOS build exports every global one, so a function Python calls (the package or the tests)
without the mark works here and is missing from the Windows wheel. Read from the sources (the installed
wheel carries no C)."""
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src" / "llamay"


def test_every_function_python_calls_is_marked_for_export():
    called = {name for f in [*SRC.rglob("*.py"), *TESTS.glob("*.py")]
              for name in re.findall(r'(?:declare\("|\blib\.)(ly_\w+)', f.read_text(encoding="utf-8"))}
    marked = {name for f in (SRC / "kernels" / "csrc").glob("*.c")
              for name in re.findall(r"^LY_API\b[^(]*\b(ly_\w+)\(", f.read_text(encoding="utf-8"), re.M)}
    assert len(called) >= 10 and called <= marked, sorted(called - marked)
