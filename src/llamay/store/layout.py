"""Stores in Ollama's layout: a read-only view (ours or Ollama's) and llamay's writable store.

<root>/blobs/sha256-<hex>                          verified content, written once (temp file, fsync, rename)
<root>/blobs/sha256-<hex>-partial                  a download in progress (store/download.py)
<root>/manifests/<host>/<namespace>/<model>/<tag>  Docker v2 manifest JSON, bytes as received or written
ref: stores-and-registries.md §A.2-A.4; ollama.md §6 (/api/tags digest and size).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import env
from ..files import fsync_dir, sha256_file, write_atomic
from ..gguf import GGUFReader
from .names import ModelName, StoreError, as_name, blob_name, check_digest, parse_name

CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
_LAYER = "application/vnd.ollama.image."
_CHUNK = 1 << 20
_ANY_DIGEST = re.compile(rb"sha256:[0-9a-f]{64}")

# ref: llama.cpp llama_ftype (general.file_type), spelled as gguf-py's LlamaFileType without MOSTLY_
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
              25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
              32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0"}


def default_root() -> Path:
    """llamay's store: $LLAMAY_HOME/models, the same shape as ~/.ollama/models."""
    return env.home() / "models"


def human_number(n: int) -> str:
    """Parameter counts as Ollama prints them (format.HumanNumber): 134.52M, 3.2B, 7B."""
    for scale, unit, places in ((1e9, "B", 1), (1e6, "M", 2)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == math.floor(value) else f"{value:.{places}f}{unit}"
    return f"{n / 1e3:.0f}K" if n >= 1000 else str(n)


def gguf_config(reader: GGUFReader) -> dict:
    """The config blob Ollama writes for a GGUF model (§A.4), from the file's header only."""
    md = reader.metadata
    arch = str(md.get("general.architecture", ""))
    n_params = sum(math.prod(t.shape) for t in reader.tensors.values())
    return {"model_format": "gguf", "model_family": arch, "model_families": [arch],
            "model_type": human_number(n_params),
            "file_type": FILE_TYPES.get(md.get("general.file_type"), "unknown")}


def manifest_digests(manifest: dict) -> list[str]:
    """Config digest then layer digests, in manifest order (validated by parse_manifest)."""
    return [manifest["config"]["digest"]] + [layer["digest"] for layer in manifest["layers"]]


def parse_manifest(raw: bytes, what: str) -> dict:
    """A Docker v2 manifest with every digest checked before anything uses it to build a path."""
    try:
        m = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"manifest of {what} is not JSON: {e}") from None
    if not isinstance(m, dict) or not isinstance(m.get("layers"), list):
        raise StoreError(f"manifest of {what} has no layers list")
    for entry in [m.get("config")] + m["layers"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("mediaType", ""), str):
            raise StoreError(f"manifest of {what} has a malformed config or layer entry: {entry!r:.120}")
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise StoreError(f"manifest of {what}: layer size {size!r} is not a byte count")
        check_digest(entry.get("digest"))
    return m


@dataclass
class StoredModel:
    """One manifest, resolved. digest: sha256 hex of the manifest bytes (Ollama's model ID, no prefix);
    size: config + layer sizes; modified: manifest mtime; model_path None when the manifest has no GGUF
    model layer (safetensors, cloud stubs): listed, not servable."""
    name: str
    model_name: ModelName
    digest: str
    model_path: Path | None
    size: int
    modified: float
    source: str
    manifest_path: Path
    config: dict = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    params: dict = field(default_factory=dict)
    license: str | None = None
    messages: list = field(default_factory=list)
    projector_path: Path | None = None


class StoreReader:
    """Read-only view of a store in Ollama's layout; nothing here creates or changes a file."""

    def __init__(self, root: Path | str, source: str):
        self.root = Path(root)
        self.source = source
        self.blobs_dir = self.root / "blobs"
        self.manifests_dir = self.root / "manifests"

    def blob_path(self, digest: str) -> Path:
        return self.blobs_dir / blob_name(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def _name_of(self, path: Path) -> ModelName:
        """The name spelled by a manifest path (StoreError when its components are not a valid name)."""
        host, ns, model, tag = path.relative_to(self.manifests_dir).parts
        return parse_name(f"{host}/{ns}/{model}:{tag}")

    def manifest_paths(self) -> list[tuple[ModelName, Path]]:
        """Every manifests/<host>/<ns>/<model>/<tag> file whose four components form a valid name
        (dot files, e.g. temp files, are not matched by the glob)."""
        found = []
        for path in sorted(self.manifests_dir.glob("*/*/*/*")):
            try:
                if path.is_file():
                    found.append((self._name_of(path), path))
            except StoreError:
                continue
        return found

    def manifest_path(self, name: ModelName | str) -> Path | None:
        """The manifest file of `name`: the path as spelled, else one that matches ignoring case."""
        name = as_name(name)
        exact = self.manifests_dir / name.manifest_relpath
        if exact.is_file():
            return exact
        return next((path for other, path in self.manifest_paths() if other == name), None)

    def read_manifest(self, name: ModelName | str) -> dict:
        name = as_name(name)
        path = self.manifest_path(name)
        if path is None:
            raise StoreError(f"model '{name.display}' not found")
        return parse_manifest(path.read_bytes(), name.display)

    def resolve(self, name: ModelName | str) -> StoredModel | None:
        """None when absent; StoreError when present but unusable (bad manifest, missing blob)."""
        name = as_name(name)
        path = self.manifest_path(name)
        if path is None:
            return None
        return self._stored_model(self._name_of(path), path)

    def models(self) -> list[StoredModel]:
        """Every usable model, newest first (as `ollama list`); broken manifests are skipped."""
        out = []
        for name, path in self.manifest_paths():
            try:
                out.append(self._stored_model(name, path))
            except (OSError, StoreError):
                continue
        return sorted(out, key=lambda m: (-m.modified, m.name))

    def _text(self, digest: str, what: str) -> str:
        path = self.blob_path(digest)
        if not path.is_file():
            raise StoreError(f"{what}: blob {digest} is missing from {self.blobs_dir}")
        return path.read_text(encoding="utf-8", errors="replace")

    def _json(self, digest: str, what: str, kind: type):
        try:
            value = json.loads(self._text(digest, what))
        except json.JSONDecodeError as e:
            raise StoreError(f"{what}: blob {digest} is not JSON: {e}") from None
        if not isinstance(value, kind):
            raise StoreError(f"{what}: blob {digest} is not a JSON {kind.__name__}")
        return value

    def _stored_model(self, name: ModelName, path: Path) -> StoredModel:
        raw = path.read_bytes()
        m = parse_manifest(raw, name.display)
        sm = StoredModel(name=name.display, model_name=name, digest=hashlib.sha256(raw).hexdigest(),
                         model_path=None, size=sum(e["size"] for e in [m["config"]] + m["layers"]),
                         modified=path.stat().st_mtime, source=self.source, manifest_path=path)
        if self.has_blob(m["config"]["digest"]):
            sm.config = self._json(m["config"]["digest"], name.display, dict)
        licenses = []
        for layer in m["layers"]:
            self._apply_layer(sm, layer, licenses)
        sm.license = "\n".join(licenses) if licenses else None
        return sm

    def _apply_layer(self, sm: StoredModel, layer: dict, licenses: list):
        """Layers as Ollama's GetModel reads them; unknown media types are skipped (§A.3)."""
        kind, digest = layer.get("mediaType", "").removeprefix(_LAYER), layer["digest"]
        if kind in ("model", "projector", "adapter"):
            if not self.has_blob(digest):
                raise StoreError(f"{sm.name}: {kind} blob {digest} is missing from {self.blobs_dir}")
            if kind == "model":
                sm.model_path = self.blob_path(digest)
            elif kind == "projector":
                sm.projector_path = self.blob_path(digest)
            # an adapter (LoRA) layer: its blob is checked; applying adapters is not built yet
        elif kind in ("template", "prompt"):
            sm.template = self._text(digest, sm.name)
        elif kind == "system":
            sm.system = self._text(digest, sm.name)
        elif kind == "license":
            licenses.append(self._text(digest, sm.name))
        elif kind == "params":
            sm.params = self._json(digest, sm.name, dict)
        elif kind == "messages":
            sm.messages = self._json(digest, sm.name, list)


class Store(StoreReader):
    """llamay's own store. Every write is atomic (temp file in the same directory, fsync, os.replace):
    a reader sees the old file or the new one, never half of one."""

    def __init__(self, root: Path | str | None = None):
        super().__init__(root if root is not None else default_root(), source="llamay")

    def _atomic_write(self, target: Path, data: bytes):
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, lambda f: f.write(data))

    def partial_path(self, digest: str) -> Path:
        return self.blobs_dir / (blob_name(digest) + "-partial")

    def commit_blob(self, partial: Path | str, digest: str) -> Path:
        """Verify `partial` (on the blobs/ filesystem) against `digest`, then rename it into place.
        A mismatch deletes the partial: resuming from wrong bytes would stay wrong."""
        partial = Path(partial)
        got = "sha256:" + sha256_file(partial)
        if got != digest:
            partial.unlink(missing_ok=True)
            raise StoreError(f"digest mismatch: expected {digest}, got {got} ({partial.name} deleted)")
        return self.install(partial, digest)

    def install(self, verified: Path | str, digest: str) -> Path:
        """Make a file whose sha256 the caller just computed the blob: flush it to disk, then one atomic
        rename."""
        target = self.blob_path(digest)
        with open(verified, "rb") as f:
            os.fsync(f.fileno())
        os.replace(verified, target)
        fsync_dir(target.parent)
        return target

    def add_file(self, path: Path | str, digest: str | None = None) -> str:
        """Copy a local file in, hashed while copying (one read); `digest`, when given, must match."""
        if digest is not None:
            check_digest(digest)
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.blobs_dir, prefix=".tmp-")
        try:
            h = hashlib.sha256()
            with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
            got = "sha256:" + h.hexdigest()
            if digest is not None and got != digest:
                raise StoreError(f"digest mismatch for {path}: expected {digest}, got {got}")
            if not self.has_blob(got):
                self.install(tmp, got)
            return got
        finally:
            Path(tmp).unlink(missing_ok=True)

    def add_bytes(self, data: bytes) -> str:
        """Small content (config, template, params) as a blob; returns its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not self.has_blob(digest):
            self._atomic_write(self.blob_path(digest), data)
        return digest

    def write_manifest(self, name: ModelName | str, manifest: dict | bytes) -> Path:
        """Write a manifest once every blob it names is present. Bytes are kept verbatim (their sha256
        stays the registry's digest). A manifest of the same name in another case is replaced."""
        name = as_name(name)
        raw = manifest if isinstance(manifest, bytes) else json.dumps(manifest, separators=(",", ":")).encode()
        missing = [d for d in manifest_digests(parse_manifest(raw, name.display)) if not self.has_blob(d)]
        if missing:
            raise StoreError(f"manifest of {name.display} names blobs not in the store: {', '.join(missing)}")
        old = self.manifest_path(name)
        target = self.manifests_dir / name.manifest_relpath
        self._atomic_write(target, raw)
        if old is not None and old != target:
            old.unlink(missing_ok=True)
            self._prune_dirs(old.parent)
        return target

    def make_manifest(self, model_digest: str, size: int, extra_layers=()) -> dict:
        """A manifest in Ollama's shape for a GGUF blob already here. extra_layers: (media type, str | bytes)
        pairs (template, system, params JSON, license), stored as blobs; the config blob is written too."""
        if not self.has_blob(model_digest):
            raise StoreError(f"blob {model_digest} is not in the store")
        config = json.dumps(gguf_config(GGUFReader(self.blob_path(model_digest))), separators=(",", ":"))
        layers = [{"mediaType": _LAYER + "model", "digest": model_digest, "size": size}]
        for media_type, content in extra_layers:
            data = content.encode() if isinstance(content, str) else bytes(content)
            layers.append({"mediaType": media_type, "digest": self.add_bytes(data), "size": len(data)})
        config_digest = self.add_bytes(config.encode())
        return {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": len(config)},
                "layers": layers}

    def remove(self, name: ModelName | str) -> list[str]:
        """Delete a manifest, then the blobs no other manifest here names. Returns the removed digests."""
        name = as_name(name)
        path = self.manifest_path(name)
        if path is None:
            raise StoreError(f"model '{name.display}' not found")
        digests = dict.fromkeys(manifest_digests(parse_manifest(path.read_bytes(), name.display)))
        path.unlink()
        self._prune_dirs(path.parent)
        still_used = self._referenced_digests()
        removed = [d for d in digests if d not in still_used and self.has_blob(d)]
        for digest in removed:
            self.blob_path(digest).unlink()
        return removed

    def copy(self, src: ModelName | str, dst: ModelName | str) -> Path:
        """dst gets src's manifest bytes: same model ID, blobs shared."""
        src, dst = as_name(src), as_name(dst)
        path = self.manifest_path(src)
        if path is None:
            raise StoreError(f"model '{src.display}' not found")
        return self.write_manifest(dst, path.read_bytes())

    def _referenced_digests(self) -> set[str]:
        """Digests named by any remaining manifest. Read as raw byte patterns, so even a manifest that
        no longer parses keeps its blobs (a removal never takes what something else may use)."""
        used = set()
        for _, path in self.manifest_paths():
            used.update(d.decode() for d in _ANY_DIGEST.findall(path.read_bytes()))
        return used

    def _prune_dirs(self, directory: Path):
        """Remove empty manifest directories up to, not including, manifests/."""
        while directory != self.manifests_dir and self.manifests_dir in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
