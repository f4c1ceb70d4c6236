"""Records what llama.cpp's llama_model_quantize writes for each case of tests/quantize_cases.py: the input's
and the output's sha256 and each tensor's type, into tests/fixtures/quantize_llamacpp.json; and, with
--tools DIR (llama.cpp's llama-imatrix and llama-quantize binaries), computes the importance matrices of
tests/fixtures/imatrix/ and records the imatrix cases, quantized by llama-quantize. Run once after a case
changes:

    pip install llama-cpp-python==0.3.36   # or LLAMA_CPP_LIB_PATH=<libllama.so dir> PYTHONPATH=<its sdist>
    python scripts/llamacpp_quantize.py --tools <llama.cpp build>/bin
"""
import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import gguf  # noqa: E402
import llama_cpp  # noqa: E402

from arch_models import sha256  # noqa: E402
from conftest import CACHE  # noqa: E402
from quantize_cases import IMATRICES, IMATRIX_DIR, IMATRIX_QUANTS, QUANTS, TEXT, inputs, params  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "quantize_llamacpp.json"


def imatrix_cases(tools: Path, files: dict, tmp: Path, record: dict):
    IMATRIX_DIR.mkdir(parents=True, exist_ok=True)
    (tmp / "text.txt").write_text(TEXT)
    for name, model in IMATRICES.items():
        fmt = "dat" if name.endswith(".dat") else "gguf"
        subprocess.run([str(tools / "llama-imatrix"), "-m", str(files[model]), "-f", str(tmp / "text.txt"), "-c", "64",
                        "-b", "64", "-t", "1", "--output-format", fmt, "-o", str(IMATRIX_DIR / name)],
                       check=True, capture_output=True)
    for name, model, ftype, imatrix in IMATRIX_QUANTS:
        dst = tmp / f"{name}.gguf"
        subprocess.run([str(tools / "llama-quantize"), "--imatrix", imatrix, str(files[model]), str(dst), ftype, "1"],
                       check=True, capture_output=True, cwd=IMATRIX_DIR)
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(dst).tensors}
        record["cases"][name] = {"input_sha256": sha256(files[model]), "output_sha256": sha256(dst), "types": types}
        print(name, dst.stat().st_size, "bytes")
    record["imatrices"] = {name: sha256(IMATRIX_DIR / name) for name in IMATRICES}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", type=Path, help="directory of llama-imatrix and llama-quantize")
    args = ap.parse_args()
    record = {"llama_cpp_python": llama_cpp.__version__, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        files = inputs(Path(tmp), CACHE)
        if args.tools:
            imatrix_cases(args.tools, files, Path(tmp), record)
        for name, model, ftype, opts in QUANTS:
            src = files[model] if "@" not in model else Path(tmp) / f"{model.replace('@', '-')}.gguf"
            dst = Path(tmp) / f"{name}.gguf"
            p = params(llama_cpp, ftype, opts)
            if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p)):
                raise SystemExit(f"llama_model_quantize failed for {name}")
            types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(dst).tensors}
            record["cases"][name] = {"input_sha256": sha256(src), "output_sha256": sha256(dst), "types": types}
            print(name, dst.stat().st_size, "bytes")
        record["inputs"] = {m: sha256(p) for m, p in files.items()}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
