"""Records ggml's own row quantization (ggml_quantize_chunk) of the inputs of tests/quantize_rows_cases.py
in tests/fixtures/quantize_rows.json: per case its description, per type the sha256 of ggml's output bytes
with no importance matrix ("sha256") and, per importance matrix of IMATRICES, with it ("sha256_imatrix":
{imatrix name: {type: sha256}}). tests/test_quantize_rows.py checks llamay's quantize_rows against it.
Run after the cases change, with a built llama.cpp:

    LLAMACPP_LIB=<.../bin/libggml-base.so> python scripts/ggml_quantize_rows.py
"""
import ctypes
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from quantize_rows_cases import CASES, IMATRICES, TYPES, case_input, imatrix_input  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))
from llamay.gguf import BY_NAME  # noqa: E402

DEFAULT_LIB = "/tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build-shared3/bin/libggml-base.so"
OUT = ROOT / "tests" / "fixtures" / "quantize_rows.json"


def load_ggml(path: str) -> ctypes.CDLL:
    g = ctypes.CDLL(path)
    g.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    g.ggml_quantize_chunk.restype = ctypes.c_size_t
    g.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    g.ggml_row_size.restype = ctypes.c_size_t
    g.ggml_quantize_init.argtypes = [ctypes.c_int]  # only the IQ types need tables; chunk calls it anyway
    g.ggml_version.restype = g.ggml_commit.restype = ctypes.c_char_p
    return g


def ggml_quantize(g: ctypes.CDLL, x: np.ndarray, name: str, imatrix: np.ndarray | None = None) -> bytes:
    qt = BY_NAME[name]
    nrows, n_per_row = x.shape
    row_size = g.ggml_row_size(qt.id, n_per_row)
    if row_size != qt.row_bytes(n_per_row):
        raise SystemExit(f"{name}: ggml's row size {row_size} != llamay's {qt.row_bytes(n_per_row)}")
    out = np.zeros(nrows * row_size, np.uint8)
    if imatrix is not None and (imatrix.dtype != np.float32 or imatrix.shape != (n_per_row,)):
        raise SystemExit(f"{name}: an imatrix must be float32 [{n_per_row}]")
    g.ggml_quantize_init(qt.id)
    got = g.ggml_quantize_chunk(qt.id, x.ctypes.data, out.ctypes.data, 0, nrows, n_per_row,
                                None if imatrix is None else imatrix.ctypes.data)
    if got != out.size:
        raise SystemExit(f"{name}: ggml_quantize_chunk wrote {got} bytes, expected {out.size}")
    return out.tobytes()


def main():
    path = os.environ.get("LLAMACPP_LIB", DEFAULT_LIB)
    g = load_ggml(path)
    fixture = {"ggml_version": g.ggml_version().decode(), "ggml_commit": g.ggml_commit().decode(),
               "imatrices": IMATRICES, "cases": []}
    for case in CASES:
        x = case_input(case)
        sha = {name: hashlib.sha256(ggml_quantize(g, x, name)).hexdigest() for name in TYPES}
        sha_im = {}
        for im in IMATRICES:
            w = imatrix_input(im, x.shape[1])
            sha_im[im["name"]] = {name: hashlib.sha256(ggml_quantize(g, x, name, w)).hexdigest() for name in TYPES}
        fixture["cases"].append({**case, "sha256": sha, "sha256_imatrix": sha_im})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {OUT} ({len(CASES)} cases x {len(TYPES)} types x {1 + len(IMATRICES)} imatrices "
          f"(none first)) from ggml {fixture['ggml_version']} "
          f"({fixture['ggml_commit']}) at {path}")


if __name__ == "__main__":
    main()
