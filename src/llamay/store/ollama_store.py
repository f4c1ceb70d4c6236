"""Ollama's store, read in place (llamay never writes there), and lookups over both stores."""
from __future__ import annotations

from pathlib import Path

from .. import env
from .layout import Store, StoredModel, StoreReader
from .names import ModelName, as_name


def ollama_root() -> Path:
    """$OLLAMA_MODELS verbatim when set, else ~/.ollama/models (ref: stores-and-registries.md §A.1)."""
    value = env.foreign("OLLAMA_MODELS")
    return Path(value).expanduser() if value else Path.home() / ".ollama" / "models"


def ollama_store(root: Path | str | None = None) -> StoreReader:
    """A read-only view: StoreReader has no method that writes."""
    return StoreReader(root if root is not None else ollama_root(), source="ollama")


def all_models(store: StoreReader | None = None, ollama: StoreReader | None = None) -> list[StoredModel]:
    """llamay's models first, then Ollama's (each newest first). A name in both appears twice; `find`
    prefers llamay's."""
    store = store if store is not None else Store()
    ollama = ollama if ollama is not None else ollama_store()
    return store.models() + ollama.models()


def find(name: ModelName | str, store: StoreReader | None = None,
         ollama: StoreReader | None = None) -> StoredModel | None:
    """The model called `name` (case-insensitive), llamay's store first; StoreError for an invalid name
    or a manifest that is present but unusable."""
    name = as_name(name)
    for reader in (store if store is not None else Store(), ollama if ollama is not None else ollama_store()):
        found = reader.resolve(name)
        if found is not None:
            return found
    return None
