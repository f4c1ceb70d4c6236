"""Pull one GGUF file from a Hugging Face model repo: `hf.co/ORG/REPO[:QUANT]` or `hf.co/ORG/REPO/FILE.gguf`.

ref: stores-and-registries.md §C (resolve URL, HEAD metadata, X-Linked-Etag) and HF's "Use Ollama with any
GGUF Model" page (both hf.co and huggingface.co; default quant Q4_K_M; the model is named hf.co/org/repo:tag).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

import httpx

from .. import env
from .download import ProgressFn, fetch_blob, fetch_unknown, new_client, unreachable
from .layout import Store, StoredModel, StoreError
from .names import ModelName, check_digest, parse_name

HOSTS = ("hf.co", "huggingface.co")
DEFAULT_QUANT = "Q4_K_M"
REVISION = "main"
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")       # HF repo ids: no '..', no '--' edges
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)      # llama.cpp gguf-split shard names
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REDIRECTS = (301, 302, 303, 307, 308)


def endpoint() -> str:
    """LLAMAY_HF_ENDPOINT, else HF_ENDPOINT (huggingface_hub's variable), else https://huggingface.co."""
    value = env.hf_endpoint() or env.foreign("HF_ENDPOINT") or "https://huggingface.co"
    return value.rstrip("/")


def _token() -> str:
    """HF_TOKEN, else the file $HF_HOME/token that `hf auth login` writes (§C.1)."""
    token = (env.foreign("HF_TOKEN") or "").strip()
    if token:
        return token
    cache = env.foreign("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(env.foreign("HF_HOME") or os.path.join(cache, "huggingface"), "token")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def auth_headers() -> dict:
    """The token as a Bearer header; sent to the Hub endpoint only, never to the CDN it redirects to."""
    token = _token()
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class HFSpec:
    repo: str                  # "org/repo"
    quant: str | None          # as typed after ':' (None: the default)
    file: str | None           # path in the repo, for the FILE.gguf form

    @property
    def model_name(self) -> ModelName:
        """hf.co/org/repo:<quant or 'latest'>; the FILE form is tagged with the file's stem."""
        tag = self.quant or "latest"
        if self.file is not None:
            stem = self.file.rsplit("/", 1)[-1][:-len(".gguf")]
            tag = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip(".-")[:80] or "latest"
        return parse_name(f"hf.co/{self.repo}:{tag}")


def _strip_host(text: str) -> str | None:
    rest = text.split("://", 1)[1] if text.startswith(("https://", "http://")) else text
    host, sep, path = rest.partition("/")
    return path if sep and host.lower() in HOSTS else None


def parse_hf_ref(text: str) -> HFSpec:
    """hf.co/ORG/REPO[:QUANT] or hf.co/ORG/REPO/PATH/FILE.gguf (huggingface.co too); StoreError otherwise."""
    path = _strip_host(text)
    if path is None:
        raise StoreError(f"{text!r} is not a Hugging Face reference (hf.co/ORG/REPO[:QUANT])")
    quant = None
    if path.rfind(":") > path.rfind("/"):
        path, quant = path.rsplit(":", 1)
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", quant):
            raise StoreError(f"{text!r}: invalid quant tag {quant!r}")
    parts = path.split("/")
    if len(parts) < 2 or not all(_REPO_PART.fullmatch(p) and ".." not in p for p in parts[:2]):
        raise StoreError(f"{text!r}: expected hf.co/ORG/REPO[:QUANT] or hf.co/ORG/REPO/FILE.gguf")
    file = "/".join(parts[2:]) or None
    if file is not None:
        if quant is not None or not file.lower().endswith(".gguf") or \
                any(p in ("", ".", "..") for p in parts[2:]):
            raise StoreError(f"{text!r}: a file in the repo must be a path ending in .gguf, without :QUANT")
        if _SPLIT.search(file):
            raise StoreError(_split_message(file))
    spec = HFSpec("/".join(parts[:2]), quant, file)
    _ = spec.model_name                           # the name must be one Ollama accepts, before any request
    return spec


def _split_message(path: str) -> str:
    return (f"{path} is one shard of a split GGUF (-NNNNN-of-NNNNN): llamay stores single-file models only; "
            "merge it with llama-gguf-split --merge, or pick a single-file quant")


def _quant_pattern(quant: str) -> re.Pattern:
    # the tag as a whole word of the file name: Q4_K does not match Q4_K_M, Q4_0 does not match IQ4_0
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", re.IGNORECASE)


def pick_file(paths: list[str], quant: str | None) -> str:
    """The GGUF for a quant tag (whole-word, case-insensitive); without one: Q4_K_M, else the first GGUF.
    Projector files (mmproj*) are never the model; a split shard is refused."""
    ggufs = sorted(p for p in paths if p.lower().endswith(".gguf")
                   and not p.rsplit("/", 1)[-1].lower().startswith("mmproj"))
    if not ggufs:
        raise StoreError("the repository has no .gguf file")
    want = quant if quant and quant.lower() != "latest" else None
    matches = [p for p in ggufs if _quant_pattern(want or DEFAULT_QUANT).search(p.rsplit("/", 1)[-1])]
    if want is not None and not matches:
        raise StoreError(f"no .gguf file for quant {want!r}; the repository has: {', '.join(ggufs)}")
    candidates = matches or ggufs
    whole = [p for p in candidates if not _SPLIT.search(p)]
    if not whole:
        raise StoreError(_split_message(candidates[0]))
    return whole[0]


def _request(client: httpx.Client, method: str, url: str, what: str, **kw) -> httpx.Response:
    try:
        r = client.request(method, url, **kw)
    except httpx.TransportError as e:  # only before a download: nothing written yet
        raise unreachable(url, "Hugging Face", e) from e
    _check(r, what)
    return r


def _check(r: httpx.Response, what: str) -> None:
    """Turn a Hub error (X-Error-Code / X-Error-Message, §C.2) into one StoreError line."""
    if r.status_code < 400:
        return
    code = r.headers.get("X-Error-Code", "")
    message = r.headers.get("X-Error-Message", "")
    hint = " (gated or private: set HF_TOKEN)" if r.status_code in (401, 403) or code == "GatedRepo" else ""
    detail = "; ".join(x for x in (code, message) if x) or r.reason_phrase
    raise StoreError(f"{what}: HTTP {r.status_code} {detail}{hint}")


def list_files(client: httpx.Client, base: str, repo: str) -> dict[str, dict]:
    """path -> tree entry for every file of the repo at REVISION (follows Link rel="next" pages)."""
    url = f"{base}/api/models/{repo}/tree/{quote(REVISION, safe='')}?recursive=true"
    files: dict[str, dict] = {}
    while url:
        r = _request(client, "GET", url, f"hf.co/{repo}: listing files", headers=auth_headers(),
                     follow_redirects=True)
        entries = r.json()
        if not isinstance(entries, list):
            raise StoreError(f"hf.co/{repo}: the tree listing is not a JSON list")
        files.update({e["path"]: e for e in entries
                      if isinstance(e, dict) and e.get("type") == "file" and isinstance(e.get("path"), str)})
        nxt = r.links.get("next", {}).get("url")
        url = urljoin(url, nxt) if nxt else None
    return files


@dataclass(frozen=True)
class FileMeta:
    url: str                   # where to GET the bytes (the CDN Location when the Hub redirects off-host)
    digest: str | None         # sha256:<hex> from X-Linked-Etag / a 64-hex ETag, else None (hash on the way)
    size: int | None
    on_hub: bool               # url is on the Hub host: the token may go with it


def _etag(value: str) -> str:
    return value.strip().removeprefix("W/").strip('"').lower()


def head_file(client: httpx.Client, base: str, repo: str, path: str) -> FileMeta:
    """HEAD the resolve URL, following redirects only while they stay on the Hub host (§C.2); the metadata
    is read from the last Hub response, which is the redirect itself for LFS files."""
    url = f"{base}/{repo}/resolve/{quote(REVISION, safe='')}/{quote(path, safe='/')}"
    hub = urlsplit(base).netloc
    for _ in range(10):
        r = _request(client, "HEAD", url, f"hf.co/{repo}/{path}", follow_redirects=False,
                     headers={**auth_headers(), "Accept-Encoding": "identity"})
        nxt = urljoin(url, r.headers["Location"]) if r.status_code in _REDIRECTS else None
        if nxt is None or urlsplit(nxt).netloc != hub:
            break
        url = nxt
    else:
        raise StoreError(f"hf.co/{repo}/{path}: too many redirects")
    if "X-Repo-Commit" not in r.headers:
        raise StoreError(f"{base} did not answer like a Hugging Face Hub (no X-Repo-Commit header)")
    tag = _etag(r.headers.get("X-Linked-Etag") or r.headers.get("ETag", ""))
    size = r.headers.get("X-Linked-Size") or (r.headers.get("Content-Length") if nxt is None else None)
    return FileMeta(nxt or url, "sha256:" + tag if _SHA256.fullmatch(tag) else None,
                    int(size) if size and size.isdigit() else None, nxt is None)


def _tree_digest(entry: dict | None) -> str | None:
    oid = ((entry or {}).get("lfs") or {}).get("oid")
    return "sha256:" + oid.lower() if isinstance(oid, str) and _SHA256.fullmatch(oid.lower()) else None


def _fetch(store: Store, client: httpx.Client, meta: FileMeta, progress: ProgressFn | None) -> tuple[str, int]:
    headers = auth_headers() if meta.on_hub else None
    if meta.digest is None:
        return fetch_unknown(store, meta.url, progress, client, headers)
    blob = fetch_blob(store, meta.url, check_digest(meta.digest), meta.size, progress, client, headers)
    return meta.digest, blob.stat().st_size


def _check_gguf(store: Store, digest: str, label: str) -> None:
    with open(store.blob_path(digest), "rb") as f:
        if f.read(4) != b"GGUF":
            raise StoreError(f"{label} is not a GGUF file (no GGUF magic)")


def pull_hf(store: Store, spec: str | HFSpec, progress: ProgressFn | None = None) -> StoredModel:
    """Download the chosen GGUF as a verified blob and write the manifest hf.co/org/repo:tag; returns the
    StoredModel. Nothing is named in the store unless the blob is complete and its sha256 checked."""
    spec = parse_hf_ref(spec) if isinstance(spec, str) else spec
    name, base = spec.model_name, endpoint()
    if progress:
        progress("pulling manifest", None, 0, 0)
    with new_client() as client:
        entry = None
        path = spec.file
        if path is None:
            files = list_files(client, base, spec.repo)
            path = pick_file(list(files), spec.quant)
            entry = files[path]
        meta = head_file(client, base, spec.repo, path)
        listed = _tree_digest(entry)
        if listed and meta.digest and listed != meta.digest:
            raise StoreError(f"hf.co/{spec.repo}/{path}: the tree lists {listed}, the file says {meta.digest}")
        if meta.digest is None and listed:
            meta = FileMeta(meta.url, listed, meta.size, meta.on_hub)
        digest, size = _fetch(store, client, meta, progress)
    _check_gguf(store, digest, f"hf.co/{spec.repo}/{path}")
    if progress:
        progress("writing manifest", None, 0, 0)
    store.write_manifest(name, store.make_manifest(digest, size))
    if progress:
        progress("success", None, 0, 0)
    return store.resolve(name)
