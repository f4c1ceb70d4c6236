"""Records llama.cpp's logits on the tiny per-architecture GGUF files of tests/arch_models.py (each written by
llama.cpp's own converter), with float16 and with float32 K/V, into tests/fixtures/llamacpp_arch_logits.npz,
with each file's sha256 so the test knows it has the very file llama.cpp ran. Run once after a case changes:

    pip install llama-cpp-python==0.3.36   # or LLAMA_CPP_LIB_PATH=<libllama.so dir> PYTHONPATH=<its sdist>
    python scripts/llamacpp_arch_logits.py
"""
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import llama_cpp  # noqa: E402

from arch_models import CASES, build, convert, sha256, token_ids  # noqa: E402
from conftest import CACHE  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "llamacpp_arch_logits.npz"
F16, F32 = 1, 0  # ggml_type


def logits(path: Path, ids: list[int], kv: int) -> np.ndarray:
    m = llama_cpp.Llama(str(path), logits_all=True, n_ctx=64, n_batch=64, n_threads=1, type_k=kv, type_v=kv,
                        verbose=False)
    m.eval(ids)
    return np.array(m.scores[:len(ids)], np.float32)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: (case, build(case)) for name, case in CASES.items()}
        paths = convert(models, Path(tmp), CACHE)
        out = {"llama_cpp_python": np.array(llama_cpp.__version__)}
        for name, (case, model) in models.items():
            ids = token_ids(model.config.vocab_size)
            out[f"{name}/sha256"] = np.array(sha256(paths[name]))
            out[f"{name}/f16kv"] = logits(paths[name], ids, F16)
            out[f"{name}/f32kv"] = logits(paths[name], ids, F32)
            print(name, out[f"{name}/sha256"])
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
