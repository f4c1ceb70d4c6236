"""Pull a model from an Ollama registry (Docker registry v2 shape; ref: stores-and-registries.md Part B).

Order: manifest, then every layer and the config blob (each verified before it becomes visible), then the
manifest is written last, so an interrupted or failed pull never leaves a model that names missing blobs."""
import json

import httpx

from .. import env
from .download import ProgressFn, fetch_blob, new_client, unreachable
from .layout import Store, StoredModel
from .names import DEFAULT_HOST, ModelName, StoreError, check_digest

DEFAULT_BASE = "https://registry.ollama.ai"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = {MANIFEST_V2, "application/vnd.oci.image.manifest.v1+json"}
MODEL_LAYER = "application/vnd.ollama.image.model"


def registry_base(name: ModelName) -> str:
    """LLAMAY_REGISTRY (default https://registry.ollama.ai) serves the default host; other hosts by https."""
    if name.host.lower() == DEFAULT_HOST:
        return (env.registry() or DEFAULT_BASE).rstrip("/")
    return f"https://{name.host}"


def pull_registry(store: Store, name: ModelName, progress: ProgressFn | None = None,
                  client: httpx.Client | None = None) -> StoredModel:
    """Pull `name` into `store` (blobs already there are not fetched again); StoreError says what failed."""
    report = progress or (lambda *a: None)
    repo = f"{registry_base(name)}/v2/{name.namespace}/{name.model}"
    own = client is None
    client = client or new_client()
    try:
        report("pulling manifest", None, 0, 0)
        raw = _get_manifest(client, f"{repo}/manifests/{name.tag}")
        manifest = validate_manifest(_parse(raw, name))
        for blob in [*manifest["layers"], manifest["config"]]:
            fetch_blob(store, f"{repo}/blobs/{blob['digest']}", blob["digest"], blob["size"], progress, client)
    finally:
        if own:
            client.close()
    report("verifying sha256 digest", None, 0, 0)
    _check_sizes(store, manifest)
    report("writing manifest", None, 0, 0)
    store.write_manifest(name, raw)              # verbatim: its sha256 stays the registry's digest
    model = store.resolve(name)
    if model is None:
        raise StoreError(f"{name.display}: manifest written but the store cannot resolve it")
    report("success", None, 0, 0)
    return model


def _get_manifest(client: httpx.Client, url: str) -> bytes:
    try:
        r = client.get(url, headers={"Accept": MANIFEST_V2})
    except httpx.TransportError as e:
        raise unreachable(url, "the model registry", e) from e
    if r.status_code == 404:
        raise StoreError(f"pull model manifest: file does not exist ({url})")
    if r.status_code == 401:
        raise StoreError(f"pull model manifest: {url}: registry asks for authentication (401); "
                         "llamay pulls public models only")
    if r.status_code >= 400:
        raise StoreError(f"pull model manifest: {url}: {r.status_code}: {r.text[:200].strip()}")
    return r.content


def _parse(raw: bytes, name: ModelName) -> dict:
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise StoreError(f"manifest of {name.display}: not JSON ({e})") from e
    if not isinstance(manifest, dict):
        raise StoreError(f"manifest of {name.display}: not a JSON object")
    return manifest


def validate_manifest(manifest: dict) -> dict:
    """Schema-2 manifest with checked digests (before any path is built from them) and one model layer."""
    if manifest.get("schemaVersion") != 2:
        raise StoreError(f"manifest: schemaVersion {manifest.get('schemaVersion')!r}, expected 2")
    if manifest.get("mediaType", MANIFEST_V2) not in MANIFEST_TYPES:
        raise StoreError(f"manifest: unsupported mediaType {manifest.get('mediaType')!r}")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers:
        raise StoreError("manifest: no layers")
    for i, entry in enumerate([manifest.get("config"), *layers]):
        _check_entry(entry, "config" if i == 0 else f"layer {i - 1}")
    if not any(layer["mediaType"] == MODEL_LAYER for layer in layers):
        raise StoreError(f"manifest: no {MODEL_LAYER} layer (not a GGUF model llamay can run)")
    return manifest


def _check_entry(entry, where: str) -> None:
    if not isinstance(entry, dict):
        raise StoreError(f"manifest: {where} is not an object")
    digest = entry.get("digest")
    if not isinstance(digest, str):
        raise StoreError(f"manifest: {where} has no digest")
    try:
        check_digest(digest)
    except StoreError as e:
        raise StoreError(f"manifest: {where}: {e}") from e
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StoreError(f"manifest: {where} ({digest[:19]}) has a bad size {size!r}")
    if not isinstance(entry.get("mediaType"), str):
        raise StoreError(f"manifest: {where} ({digest[:19]}) has no mediaType")


def _check_sizes(store: Store, manifest: dict) -> None:
    """Blobs were hashed on arrival; a blob already present must still have the manifest's size."""
    for blob in [*manifest["layers"], manifest["config"]]:
        got = store.blob_path(blob["digest"]).stat().st_size
        if got != blob["size"]:
            raise StoreError(f"blob {blob['digest']}: {got} bytes, manifest says {blob['size']}")
