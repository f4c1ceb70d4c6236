"""llamay: a local inference engine for GGUF language models.

`llamay.load(path)` returns an LLM; the engine (and the C kernels) load on first use, so importing a
light subpackage such as llamay.gguf stays light."""
__version__ = "0.1.0"
__all__ = ["LLM", "ContextOverflow", "LoadOptions", "load"]


def __getattr__(name: str):
    if name in __all__:
        from .engine import llm
        return getattr(llm, name)
    raise AttributeError(f"module 'llamay' has no attribute {name!r}")
