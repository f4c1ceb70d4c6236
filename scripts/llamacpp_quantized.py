"""Quantizes the tiny Qwen3 of tests/test_quantized_llamacpp.py with llama.cpp's own llama_model_quantize
(through llama-cpp-python) into tests/fixtures/quantized/, and records llama.cpp's logits on each file
(float32 K/V) with its sha256. Run once after the model or the formats change:

    pip install llama-cpp-python==0.3.36   # or LLAMA_CPP_LIB_PATH=<libllama.so dir> PYTHONPATH=<its sdist>
    python scripts/llamacpp_quantized.py
"""
import ctypes
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import llama_cpp  # noqa: E402

from arch_models import convert, sha256, token_ids  # noqa: E402
from conftest import CACHE  # noqa: E402
from test_quantized_llamacpp import CASE, FORMATS, OUT, build_quantizable  # noqa: E402


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    out = {"llama_cpp_python": np.array(llama_cpp.__version__)}
    with tempfile.TemporaryDirectory() as tmp:
        f32 = convert({"qwen3": (CASE, build_quantizable())}, Path(tmp), CACHE)["qwen3"]
        for name, ftype in FORMATS.items():
            path = OUT / f"qwen3-tiny-{name}.gguf"
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = ftype
            params.nthread = 1
            if llama_cpp.llama_model_quantize(str(f32).encode(), str(path).encode(), ctypes.byref(params)):
                raise SystemExit(f"llama_model_quantize failed for {name}")
            m = llama_cpp.Llama(str(path), logits_all=True, n_ctx=64, n_batch=64, n_threads=1, type_k=0,
                                type_v=0, verbose=False)
            ids = token_ids(260)
            m.eval(ids)
            out[f"{name}/sha256"] = np.array(sha256(path))
            out[f"{name}/f32kv"] = np.array(m.scores[:len(ids)], np.float32)
            print(name, path.stat().st_size, "bytes")
    np.savez_compressed(OUT / "llamacpp_logits.npz", **out)


if __name__ == "__main__":
    main()
