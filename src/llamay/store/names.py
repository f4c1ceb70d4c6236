"""Model names and digests as Ollama spells them, validated before any path is built from them.

ref: stores-and-registries.md §A.5 (Ollama `types/model/name.go`) and §A.2 (digest rule).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"

# part -> (characters allowed after the first, max length); the first is always alnum or '_'. ASCII only.
_PARTS = {"host": ("-_.:", 350), "namespace": ("-_", 80), "model": ("-_.", 80), "tag": ("-_.", 80)}
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class StoreError(Exception):
    """A store operation refused or failed; the message is one line a user can act on."""


def _check_part(kind: str, text: str, whole: str) -> str:
    extra, max_len = _PARTS[kind]
    ok = 1 <= len(text) <= max_len and text[0] in _ALNUM and all(c in _ALNUM or c in extra for c in text)
    if not ok:
        allowed = "letters, digits, '_'" + "".join(f", {c!r}" for c in extra if c != "_")
        raise StoreError(f"invalid model name {whole!r}: {kind} {text!r} must be 1-{max_len} of {allowed}, "
                         "starting with a letter, digit or '_'")
    return text


@dataclass(frozen=True, eq=False)
class ModelName:
    """host/namespace/model:tag with the case as typed; equality and hashing ignore ASCII case (EqualFold)."""
    host: str
    namespace: str
    model: str
    tag: str

    def __post_init__(self):
        """Built directly or by parse_name, a name never holds a part that could leave manifests/."""
        whole = f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        for kind in _PARTS:
            _check_part(kind, getattr(self, kind), whole)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.host.lower(), self.namespace.lower(), self.model.lower(), self.tag.lower())

    def __eq__(self, other) -> bool:
        return isinstance(other, ModelName) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def display(self) -> str:
        """Ollama's DisplayShortest: default host and `library/` dropped, `:tag` always shown."""
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    @property
    def full(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def manifest_relpath(self) -> PurePosixPath:
        """manifests/<this>: always four validated components, none of them '.' or '..'."""
        return PurePosixPath(self.host, self.namespace, self.model, self.tag)

    def __str__(self) -> str:
        return self.display


def _cut_last(text: str, sep: str, whole: str) -> tuple[str, str] | None:
    """Split at the last `sep`; None when absent; an empty side makes the name invalid."""
    before, found, after = text.rpartition(sep)
    if not found:
        return None
    if not before or not after:
        raise StoreError(f"invalid model name {whole!r}: empty part around {sep!r}")
    return before, after


def parse_name(text: str) -> ModelName:
    """`model`, `model:tag`, `ns/model[:tag]`, `host/ns/model[:tag]`, optionally `scheme://host/...`;
    missing parts take Ollama's defaults. StoreError on anything else."""
    if not isinstance(text, str) or not text:
        raise StoreError(f"invalid model name {text!r}: empty")
    host, namespace, model, tag = DEFAULT_HOST, DEFAULT_NAMESPACE, text, DEFAULT_TAG
    if text.rfind(":") > text.rfind("/"):
        model, tag = _cut_last(text, ":", text)
    parts = _cut_last(model, "/", text)
    if parts is not None:
        namespace, model = parts
        parts = _cut_last(namespace, "/", text)
        if parts is not None:
            host, namespace = parts
            host = host.split("://", 1)[1] if "://" in host else host
    for kind, part in (("host", host), ("namespace", namespace), ("model", model), ("tag", tag)):
        _check_part(kind, part, text)  # errors quote the text as typed
    return ModelName(host, namespace, model, tag)


def as_name(name: ModelName | str) -> ModelName:
    return name if isinstance(name, ModelName) else parse_name(name)


def check_digest(text: str) -> str:
    """'sha256:' + 64 lowercase hex, returned unchanged; anything else (uppercase, '-', padding) is refused."""
    if not isinstance(text, str) or _DIGEST.fullmatch(text) is None:
        shown = text if not isinstance(text, str) or len(text) <= 80 else text[:77] + "..."
        raise StoreError(f"invalid digest {shown!r}: expected 'sha256:' and 64 lowercase hex digits")
    return text


def blob_name(digest: str) -> str:
    """File name of a blob: the digest with ':' replaced by '-' (sha256-<hex>)."""
    return "sha256-" + check_digest(digest)[7:]


def looks_like_path(text: str) -> bool:
    """A file name, not a model name: a .gguf suffix, or a path from /, ., .. or ~ (model names have none)."""
    return text.lower().endswith(".gguf") or text.startswith(("/", "./", "../", "~"))
