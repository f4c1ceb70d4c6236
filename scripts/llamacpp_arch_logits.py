"""Records llama.cpp's logits on the tiny per-architecture GGUF files of tests/arch_models.py (each written by
llama.cpp's own converter), with float16 and with float32 K/V, into tests/fixtures/llamacpp_arch_logits.npz,
with each file's sha256 so the test knows it has the very file llama.cpp ran. Run once after a case changes:

    pip install llama-cpp-python==0.3.36   # or LLAMA_CPP_LIB_PATH=<libllama.so dir> PYTHONPATH=<its sdist>
    python scripts/llamacpp_arch_logits.py [--cases MODULE] [CASE ...]

Naming cases records only those and keeps every other case's entries from the existing file. --cases: the
tests/ module whose CASES to take (default arch_models), recorded into tests/fixtures/llamacpp_<MODULE>.npz
for any other module (a family's own cases, e.g. hybrid_shortconv).
"""
import importlib
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import llama_cpp  # noqa: E402

from arch_models import build, convert, sha256, token_ids  # noqa: E402
from conftest import CACHE  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
F16, F32 = 1, 0  # ggml_type


def logits(path: Path, ids: list[int], kv: int, n_ctx: int) -> np.ndarray:
    m = llama_cpp.Llama(str(path), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, n_threads=1, type_k=kv, type_v=kv,
                        verbose=False)
    m.eval(ids)
    return np.array(m.scores[:len(ids)], np.float32)


def main(names: list[str], module: str = "arch_models"):
    CASES = importlib.import_module(module).CASES
    OUT = FIXTURES / ("llamacpp_arch_logits.npz" if module == "arch_models" else f"llamacpp_{module}.npz")
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: (CASES[name], build(CASES[name])) for name in names or CASES}
        paths = convert(models, Path(tmp), CACHE)
        out = {k: v for k, v in np.load(OUT).items()} if names and OUT.exists() else {}
        out["llama_cpp_python"] = np.array(llama_cpp.__version__)
        for name, (case, model) in models.items():
            ids = token_ids(model.config.vocab_size, case.n_tokens)
            out[f"{name}/sha256"] = np.array(sha256(paths[name]))
            out[f"{name}/f16kv"] = logits(paths[name], ids, F16, case.n_ctx)
            out[f"{name}/f32kv"] = logits(paths[name], ids, F32, case.n_ctx)
            print(name, out[f"{name}/sha256"])
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--cases"]:
        main(args[2:], args[1])
    else:
        main(args)
