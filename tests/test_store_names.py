"""Model names and digests: Ollama's rules as stores-and-registries.md §A.5 / §A.2 state them (the
reference), including every path-traversal spelling, which must be refused before a path exists."""
import hashlib

import pytest

from llamay.store import (
    ModelName,
    Store,
    StoreError,
    blob_name,
    check_digest,
    parse_name,
)

HEX = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize("text, parts, display", [
    ("llama3.2", ("registry.ollama.ai", "library", "llama3.2", "latest"), "llama3.2:latest"),
    ("qwen2.5:0.5b", ("registry.ollama.ai", "library", "qwen2.5", "0.5b"), "qwen2.5:0.5b"),
    ("someuser/m", ("registry.ollama.ai", "someuser", "m", "latest"), "someuser/m:latest"),
    ("someuser/m:v1", ("registry.ollama.ai", "someuser", "m", "v1"), "someuser/m:v1"),
    ("hf.co/org/repo:Q4_K_M", ("hf.co", "org", "repo", "Q4_K_M"), "hf.co/org/repo:Q4_K_M"),
    ("localhost:8080/ns/m", ("localhost:8080", "ns", "m", "latest"), "localhost:8080/ns/m:latest"),
    ("https://example.com/ns/m:t", ("example.com", "ns", "m", "t"), "example.com/ns/m:t"),
    ("http://localhost:5000/ns/m:t", ("localhost:5000", "ns", "m", "t"), "localhost:5000/ns/m:t"),
    ("registry.ollama.ai/library/x:y", ("registry.ollama.ai", "library", "x", "y"), "x:y"),
    ("Registry.Ollama.AI/Library/X:Y", ("Registry.Ollama.AI", "Library", "X", "Y"), "X:Y"),
    ("_a-b.c/_x:_y", ("registry.ollama.ai", "_a-b.c", "_x", "_y"), None),  # '.' is not allowed in ns
])
def test_forms_and_defaults(text, parts, display):
    if display is None:
        with pytest.raises(StoreError):
            parse_name(text)
        return
    n = parse_name(text)
    assert (n.host, n.namespace, n.model, n.tag) == parts
    assert n.display == display
    assert str(n.manifest_relpath) == "/".join(parts)


def test_case_insensitive_equality_keeps_case():
    a, b = parse_name("Mistral:Latest"), parse_name("registry.ollama.ai/library/mistral")
    assert a == b and hash(a) == hash(b)
    assert a.model == "Mistral" and str(a.manifest_relpath).endswith("Mistral/Latest")
    assert parse_name("mistral:7b") != parse_name("mistral:8b")
    assert len({a, b, parse_name("MISTRAL")}) == 1


@pytest.mark.parametrize("text", [
    "", "a/", "/a", ":t", "a:", "a//b", "a/b/", "x/y/z/w",  # empty sides, too many parts
    "..", "../x", "../../etc/passwd", "a/../b", "./a", ".hidden", "-a", "a/-b",  # first character rules
    "/abs/path", "ns/a\\b", "a b", "a\0b", "a:b\0", "a\n", "modèle", "a:b:c", "a@sha256:x",
    "a" * 81, "a:" + "t" * 81, "n" * 81 + "/m", "h" * 351 + "/n/m",
    "ns.x/m", "h/n/m:t.a/g", "http://ns/model", "ftp:/h/n/m",
])
def test_invalid_names(text):
    with pytest.raises(StoreError):
        parse_name(text)


def test_lengths_at_the_limits():
    assert parse_name("m" * 80 + ":" + "t" * 80).model == "m" * 80
    assert parse_name("n" * 80 + "/m").namespace == "n" * 80
    assert parse_name("h" * 350 + "/n/m").host == "h" * 350
    assert parse_name("h.example:1234/n/m").host == "h.example:1234"


def test_digest_rule():
    assert check_digest("sha256:" + HEX) == "sha256:" + HEX
    assert blob_name("sha256:" + HEX) == "sha256-" + HEX


@pytest.mark.parametrize("digest", [
    "sha256:" + HEX.upper(), "sha256-" + HEX, "sha256:" + HEX[:-1], "sha256:" + HEX + "0",
    "sha256:" + HEX + "\n", " sha256:" + HEX, "sha512:" + HEX, HEX, "sha256:../../../etc/passwd",
    "sha256:" + "../" * 21 + "x", "sha256:/" + HEX[1:], "sha256:" + HEX[:-1] + "\0", "", None, 7,
    "sha256:" + HEX[:-1] + "g", "SHA256:" + HEX,
])
def test_bad_digests_are_refused_before_a_path_is_built(tmp_path, digest):
    with pytest.raises(StoreError):
        check_digest(digest)
    store = Store(tmp_path)
    for op in (store.blob_path, store.partial_path, store.has_blob):
        with pytest.raises(StoreError):
            op(digest)
    assert list(tmp_path.iterdir()) == []


def test_model_name_is_a_value():
    n = parse_name("a/b:c")
    assert n == ModelName("registry.ollama.ai", "a", "b", "c")
    with pytest.raises(AttributeError):
        n.tag = "d"


@pytest.mark.parametrize("parts", [("registry.ollama.ai", "library", "..", "latest"), ("..", "a", "b", "c"),
                                   ("h", "n", "m", "../../x"), ("/", "n", "m", "t"), ("h", "n", "m", "")])
def test_a_name_built_directly_is_validated_too(parts):
    with pytest.raises(StoreError):
        ModelName(*parts)
