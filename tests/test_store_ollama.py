"""Ollama's store read in place (laid out as stores-and-registries.md §A.2-A.4 shows, built here in
tmp_path), lookups over both stores, and the list/show/rm/cp commands. Ollama's store must come out of
every test byte for byte as it went in."""
import argparse
import hashlib
import json
import os
import re
import time

import gguf
import pytest
from test_store_layout import TEMPLATE, add_model, sha, write_gguf

from llamay.cli import store_cmds
from llamay.cli.common import CLIError
from llamay.cli.store_cmds import human_bytes, human_time
from llamay.store import Store, StoreError, all_models, find, ollama_root, ollama_store

LAYER = "application/vnd.ollama.image."
OLLAMA_PARAMS = {"stop": ["<|user|>", "<|end|>"], "temperature": 0.7}
CONFIG = {"model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "3.2B",
          "file_type": "Q4_K_M", "architecture": "amd64", "os": "linux"}
TOTAL = 101_000_000  # the whole model, config included: `ollama list` shows 101 MB


def put_blob(root, data: bytes) -> dict:
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / ("sha256-" + hashlib.sha256(data).hexdigest())).write_bytes(data)
    return {"digest": sha(data), "size": len(data)}


def ollama_model(root, tmp_path, relpath, extra_layers=(), total=None) -> bytes:
    """A model as Ollama stores it: GGUF, template, license, params layers and a config blob. With
    `total`, the GGUF blob is padded (sparse) so that config + layers add up to it."""
    gguf_path = tmp_path / (relpath.replace("/", "_") + ".gguf")
    data = write_gguf(gguf_path)
    layers = [(LAYER + "template", TEMPLATE.encode()), (LAYER + "license", b"Apache License\nVersion 2.0"),
              (LAYER + "params", json.dumps(OLLAMA_PARAMS).encode()), *extra_layers]
    config = json.dumps(CONFIG).encode()
    if total is not None:
        data += b"\0" * (total - len(config) - sum(len(b) for _, b in layers) - len(data))
    entries = [{"mediaType": LAYER + "model", **put_blob(root, data)}]
    entries += [{"mediaType": media, **put_blob(root, body)} for media, body in layers]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **put_blob(root, config)},
                "layers": entries}
    raw = json.dumps(manifest, indent=3).encode()  # any bytes: the model ID is their sha256
    path = root / "manifests" / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return raw


def snapshot(root) -> dict:
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """(llamay Store, Ollama root) wired through $LLAMAY_HOME and $OLLAMA_MODELS, as the CLI finds them."""
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    root = tmp_path / "ollama"
    ollama_model(root, tmp_path, "registry.ollama.ai/library/tinyllama/latest")
    ollama_model(root, tmp_path, "registry.ollama.ai/someuser/mymodel/v1",
                 extra_layers=[(LAYER + "system", b"You are terse."), (LAYER + "future-thing", b"?")])
    ollama_model(root, tmp_path, "hf.co/org/repo/Q8_0")
    gguf_path = tmp_path / "mine.gguf"
    store = Store()
    add_model(store, "mine:v1", (gguf_path, write_gguf(gguf_path, license_text="MIT License\nmore")))
    return store, root


def ns(**kw):
    return argparse.Namespace(**kw)


def test_roots_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "x"))
    assert ollama_root() == tmp_path / "x"
    monkeypatch.delenv("OLLAMA_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ollama_root() == tmp_path / ".ollama" / "models"
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "h"))
    assert Store().root == tmp_path / "h" / "models"


def test_ollama_models_are_read_in_place(stores):
    _, root = stores
    before = snapshot(root)
    models = all_models()
    assert (models[0].name, models[0].source) == ("mine:v1", "llamay")
    assert sorted((m.name, m.source) for m in models[1:]) == [
        ("hf.co/org/repo:Q8_0", "ollama"), ("someuser/mymodel:v1", "ollama"), ("tinyllama:latest", "ollama")]
    tiny = find("TinyLlama")
    raw = (root / "manifests/registry.ollama.ai/library/tinyllama/latest").read_bytes()
    m = json.loads(raw)
    assert tiny.source == "ollama" and tiny.digest == hashlib.sha256(raw).hexdigest()
    assert tiny.size == sum(os.path.getsize(root / "blobs" / e["digest"].replace(":", "-"))
                            for e in [m["config"]] + m["layers"])
    assert tiny.model_path == root / "blobs" / m["layers"][0]["digest"].replace(":", "-")
    assert (tiny.template, tiny.params, tiny.system) == (TEMPLATE, OLLAMA_PARAMS, None)
    assert tiny.license == "Apache License\nVersion 2.0" and tiny.config == CONFIG
    assert find("someuser/mymodel:v1").system == "You are terse."  # the unknown layer type is skipped
    assert find("nothere") is None
    with pytest.raises(StoreError):
        find("../../etc")
    assert snapshot(root) == before


def test_llamay_store_wins_a_name_in_both(stores, tmp_path):
    store, _ = stores
    gguf_path = tmp_path / "t.gguf"
    add_model(store, "tinyllama", (gguf_path, write_gguf(gguf_path, n_rows=4)))
    assert find("tinyllama").source == "llamay"
    assert [m.source for m in all_models() if m.name == "tinyllama:latest"] == ["llamay", "ollama"]


def test_the_ollama_view_cannot_write(stores):
    reader = ollama_store()
    assert not any(hasattr(reader, op) for op in ("write_manifest", "remove", "copy", "add_file", "commit_blob"))


def test_missing_stores_are_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nothing"))
    assert all_models() == [] and find("x") is None
    assert list(tmp_path.iterdir()) == []


def list_rows(capsys) -> list[list[str]]:
    store_cmds.run_list(ns())
    lines = capsys.readouterr().out.splitlines()
    return [re.split(r" {3,}", line) for line in lines]


def test_list(stores, tmp_path, capsys):
    store, root = stores
    ollama_model(root, tmp_path, "registry.ollama.ai/library/big/latest", total=TOTAL)
    manifest = root / "manifests/registry.ollama.ai/library/big/latest"
    two_hours_ago = time.time() - 2 * 3600 - 5
    os.utime(manifest, (two_hours_ago, two_hours_ago))
    rows = list_rows(capsys)
    assert rows[0] == ["NAME", "ID", "SIZE", "QUANT", "ARCH", "MODIFIED", "SOURCE"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["big:latest"] == ["big:latest", hashlib.sha256(manifest.read_bytes()).hexdigest()[:12],
                                     "101 MB", "Q4_K_M", "llama", "2 hours ago", "ollama"]
    mine = by_name["mine:v1"]
    mine_raw = (store.root / "manifests/registry.ollama.ai/library/mine/v1").read_bytes()
    assert mine[1] == hashlib.sha256(mine_raw).hexdigest()[:12]
    assert mine[3:5] + mine[6:] == [gguf.LlamaFileType(7).name[7:], "llama", "llamay"]
    assert re.fullmatch(r"Less than a second ago|\d+ seconds ago", mine[5]), mine[5]  # made just now (a loaded machine is slow)
    assert rows[1][0] == "mine:v1" and rows[-1][0] == "big:latest" and len(rows) == 6


def test_list_falls_back_to_the_gguf_header(stores, tmp_path, capsys):
    _, root = stores
    raw = ollama_model(root, tmp_path, "registry.ollama.ai/library/noconfig/latest")
    m = json.loads(raw)
    m["config"] = {"mediaType": "application/vnd.docker.container.image.v1+json", **put_blob(root, b"{}")}
    (root / "manifests/registry.ollama.ai/library/noconfig/latest").write_text(json.dumps(m))
    row = {r[0]: r for r in list_rows(capsys)}["noconfig:latest"]
    assert row[3:5] == [gguf.LlamaFileType(7).name[7:], "llama"]


# ref: ollama format/bytes_edge_cases_test.go (HumanBytes, decimal units)
@pytest.mark.parametrize("n, text", [(0, "0 B"), (999, "999 B"), (1000, "1 KB"), (999999, "999 KB"),
                                     (1000000, "1 MB"), (999999999999, "999 GB"), (1000000000000, "1 TB"),
                                     (2100, "2.1 KB"), (3000000, "3 MB"), (10500, "10 KB"), (15700000, "15 MB"),
                                     (99900000000, "99 GB"), (1010, "1.0 KB"), (1050, "1.1 KB"),
                                     (1009000, "1.0 MB"), (1234567890123456, "1234 TB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


# ref: ollama format/time.go humanDuration and format/time_test.go
@pytest.mark.parametrize("ago, text", [(0.5, "Less than a second ago"), (1, "1 second ago"), (59, "59 seconds ago"),
                                       (60, "About a minute ago"), (119, "About a minute ago"),
                                       (120, "2 minutes ago"), (3599, "59 minutes ago"), (3600, "About an hour ago"),
                                       (7200, "2 hours ago"), (47 * 3600, "47 hours ago"),
                                       (48 * 3600, "2 days ago"), (14 * 86400, "2 weeks ago"),
                                       (60 * 86400, "2 months ago"), (3 * 365 * 86400, "3 years ago"),
                                       (-48 * 3600, "2 days from now"), (-0.8, "Less than a second from now")])
def test_human_time(ago, text):
    assert human_time(1e9 - ago, now=1e9) == text


def show(capsys, name) -> str:
    store_cmds.run_show(ns(name=name))
    return capsys.readouterr().out


def row(out: str, key: str) -> str:
    line = next(line for line in out.splitlines() if line.strip().startswith(key + "  "))
    return line.strip()[len(key):].strip()


def test_show_ollama_model(stores, capsys):
    out = show(capsys, "tinyllama")
    ref = gguf.GGUFReader(find("tinyllama").model_path)
    assert row(out, "architecture") == "llama" and row(out, "quantization") == "Q4_K_M"
    assert row(out, "parameters") == "3.2B" and row(out, "source") == "ollama"
    assert row(out, "context length") == str(ref.fields["llama.context_length"].contents())
    assert row(out, "embedding length") == "16"
    assert [line.strip() for line in out.splitlines() if line.strip().startswith("stop ")] == \
        ['stop           "<|user|>"', 'stop           "<|end|>"']
    assert row(out, "temperature") == "0.7"
    template = out.split("  Template\n")[1].split("\n\n")[0]
    assert template.strip() == TEMPLATE
    assert out.split("  License\n")[1].strip() == "Apache License"


def test_show_llamay_model_uses_the_gguf_header(stores, capsys):
    out = show(capsys, "mine:v1")
    assert row(out, "quantization") == gguf.LlamaFileType(7).name[7:] and row(out, "parameters") == "128"
    assert row(out, "context length") == "2048" and row(out, "source") == "llamay"
    assert "{% for m in messages %}" in out.split("  Template\n")[1]
    assert out.split("  License\n")[1].strip() == "MIT License"


def test_show_missing_and_invalid(stores, tmp_path):
    with pytest.raises(CLIError, match="model 'nothere:latest' not found"):
        store_cmds.run_show(ns(name="nothere"))
    with pytest.raises(CLIError, match="invalid model name"):
        store_cmds.run_show(ns(name="a/"))
    with pytest.raises(CLIError, match="^no such file: ../nothere/x.gguf$"):
        store_cmds.run_show(ns(name="../nothere/x.gguf"))
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    with pytest.raises(CLIError, match="bad.gguf: "):
        store_cmds.run_show(ns(name=str(tmp_path / "bad.gguf")))


def test_show_of_a_gguf_file_reads_its_header(stores, capsys):
    """A llama.cpp user's `show FILE`: the same rows from the file's header, the file as the source."""
    path = str(find("mine:v1").model_path)
    out = show(capsys, path)
    assert row(out, "quantization") == gguf.LlamaFileType(7).name[7:] and row(out, "parameters") == "128"
    assert row(out, "context length") == "2048" and row(out, "source") == f"file {path}"
    assert "{% for m in messages %}" in out.split("  Template\n")[1]


def test_rm(stores, capsys):
    store, root = stores
    before = snapshot(root)
    with pytest.raises(CLIError, match="Ollama's store .*only reads.*ollama rm tinyllama:latest"):
        store_cmds.run_rm(ns(names=["tinyllama"]))
    with pytest.raises(CLIError, match="not found"):
        store_cmds.run_rm(ns(names=["nothere"]))
    with pytest.raises(CLIError, match="invalid model name"):
        store_cmds.run_rm(ns(names=["a/"]))
    store_cmds.run_rm(ns(names=["Mine:v1"]))
    assert capsys.readouterr().out == "deleted 'Mine:v1'\n"
    assert store.resolve("mine:v1") is None and list((store.root / "blobs").iterdir()) == []
    assert snapshot(root) == before


def test_cp(stores, capsys):
    store, root = stores
    before, blobs = snapshot(root), sorted(p.name for p in (store.root / "blobs").iterdir())
    with pytest.raises(CLIError, match="Ollama's store .*only reads.*duplicate"):
        store_cmds.run_cp(ns(source="tinyllama", destination="mytiny"))
    assert store.resolve("mytiny") is None and sorted(p.name for p in (store.root / "blobs").iterdir()) == blobs
    with pytest.raises(CLIError, match="not found"):
        store_cmds.run_cp(ns(source="nothere", destination="x"))
    with pytest.raises(CLIError, match="invalid model name"):
        store_cmds.run_cp(ns(source="mine:v1", destination="bad name"))
    store_cmds.run_cp(ns(source="mine:v1", destination="backup/mine:v1"))
    assert capsys.readouterr().out == "copied 'mine:v1' to 'backup/mine:v1'\n"
    assert find("backup/mine:v1").digest == find("mine:v1").digest
    assert sorted(p.name for p in (store.root / "blobs").iterdir()) == blobs
    assert snapshot(root) == before


def test_parsers_accept_the_documented_arguments():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    for name in ("list", "show", "rm", "cp"):
        getattr(store_cmds, f"add_{name}_parser")(sub.add_parser(name))
    assert parser.parse_args(["rm", "a", "b"]).names == ["a", "b"]
    assert vars(parser.parse_args(["cp", "a", "b"])) == {"command": "cp", "source": "a", "destination": "b"}
    assert parser.parse_args(["show", "x"]).name == "x"
    assert vars(parser.parse_args(["list"])) == {"command": "list"}
