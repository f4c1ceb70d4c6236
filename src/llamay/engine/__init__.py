"""The engine: loading a model (LLM, load), sampling, the scheduler that batches sequences, snapshots and
embeddings, and the errors its callers handle. The server and the CLI import these names from here, not
from the packages below the engine. Names load on first use, so importing a light module such as
llamay.engine.sampling does not load the kernels."""
import importlib

_EXPORTS = {
    ".llm": ("LLM", "ContextOverflow", "load"),
    ".sampling": ("Sampler", "SamplingParams", "apply_penalties", "filter_candidates"),
    ".scheduler": ("Scheduler", "Overloaded"),
    ".session": ("Session",),
    ".context_store": ("PageShare", "ShareExceeded"),
    ".job": ("Job", "Done", "Piece"),
    # errors and readers of the layers below, for the server's error mapping and model checks
    "..kv": ("OutOfPages",),
    "..kv.snapshot_format": ("SnapshotError",),
    "..grammar": ("Grammar", "GrammarBusy", "GrammarError"),
    "..gguf": ("GGUFError", "GGUFReader"),
    "..models": ("UnsupportedModel",),
    "..models.encoder_spec": ("is_encoder",),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name], __name__), name)
