"""Records llama.cpp's logits (float32 K/V) with each tiny LoRA adapter of tests/lora_cases.py on its base,
both files written by llama.cpp's own converters, into tests/fixtures/llamacpp_lora_logits.npz with the
files' sha256. Run once after a case changes:

    pip install llama-cpp-python==0.3.36   # or LLAMA_CPP_LIB_PATH=<libllama.so dir> PYTHONPATH=<its sdist>
    python scripts/llamacpp_lora_logits.py
"""
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import llama_cpp  # noqa: E402

from arch_models import build, sha256, token_ids  # noqa: E402
from conftest import CACHE  # noqa: E402
from lora_cases import ADAPTERS, files  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "llamacpp_lora_logits.npz"


def main():
    out = {"llama_cpp_python": np.array(llama_cpp.__version__)}
    with tempfile.TemporaryDirectory() as tmp:
        bases, adapters = files(Path(tmp), CACHE, build)
        for name, (base, _, _) in ADAPTERS.items():
            ids = token_ids(300)
            m = llama_cpp.Llama(str(bases[base]), lora_path=str(adapters[name]), lora_scale=1.0, logits_all=True,
                                n_ctx=64, n_batch=64, n_threads=1, type_k=0, type_v=0, verbose=False)
            m.eval(ids)
            out[f"{name}/logits"] = np.array(m.scores[:len(ids)], np.float32)
            out[f"{name}/base_sha256"] = np.array(sha256(bases[base]))
            out[f"{name}/adapter_sha256"] = np.array(sha256(adapters[name]))
            print(name)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
