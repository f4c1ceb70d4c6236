"""Model store: Ollama-shaped blobs and manifests under $LLAMAY_HOME/models, Ollama's own store read in
place, and (store/download.py, registry.py, hf.py, pypi.py) pulls into it."""
from .layout import FILE_TYPES, Store, StoredModel, StoreReader, default_root, gguf_config, human_number
from .layout import manifest_digests, parse_manifest
from .names import ModelName, StoreError, blob_name, check_digest, looks_like_path, parse_name
from .ollama_store import all_models, find, ollama_root, ollama_store

__all__ = ["FILE_TYPES", "ModelName", "Store", "StoreError", "StoreReader", "StoredModel", "all_models",
           "blob_name", "check_digest", "default_root", "find", "gguf_config", "human_number",
           "looks_like_path", "manifest_digests", "ollama_root", "ollama_store", "parse_manifest", "parse_name"]
