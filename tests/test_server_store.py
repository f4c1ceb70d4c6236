"""`llamay serve` over the store: /api/pull from a registry on 127.0.0.1 streams Ollama's progress objects,
the pulled model is listed and served by name with its system and params layers applied, and /api/copy
and /api/delete change llamay's store (a blob stays while another name uses it)."""
import json

import httpx
import pytest

from conftest import LiveServer
from store_servers import CONFIG_TYPE, MANIFEST_V2, FakeRegistry

pytestmark = pytest.mark.model
SYSTEM = "You answer in one word."


@pytest.fixture(scope="module")
def setup(smollm_path, tmp_path_factory):
    home, ollama = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("ollama")
    with pytest.MonkeyPatch.context() as mp, FakeRegistry() as reg:
        mp.setenv("LLAMAY_HOME", str(home))
        mp.setenv("OLLAMA_MODELS", str(ollama))
        mp.setenv("LLAMAY_REGISTRY", reg.url)
        layers = [("application/vnd.ollama.image.model", smollm_path.read_bytes()),
                  ("application/vnd.ollama.image.system", SYSTEM.encode()),
                  ("application/vnd.ollama.image.template", b"Q: {{ .System }} {{ .Prompt }}\nA:"),
                  ("application/vnd.ollama.image.params", b'{"temperature": 0, "stop": ["\\n"]}')]
        config = json.dumps({"model_format": "gguf", "model_family": "llama"}).encode()
        reg.add_manifest("library/smol", "135m", {
            "schemaVersion": 2, "mediaType": MANIFEST_V2,
            "config": {"mediaType": CONFIG_TYPE, "digest": reg.add_blob(config), "size": len(config)},
            "layers": [{"mediaType": t, "digest": reg.add_blob(b), "size": len(b)} for t, b in layers]})
        server = LiveServer(["-m", str(smollm_path), "--threads", "2", "-c", "1024"])
        try:
            yield server, home
        finally:
            server.stop()


def test_pull_streams_progress_then_the_model_is_served_with_its_layers(setup):
    server, home = setup
    with httpx.stream("POST", server.url + "/api/pull", json={"model": "smol:135m"}, timeout=120) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        updates = [json.loads(line) for line in r.iter_lines() if line]
    assert updates[0] == {"status": "pulling manifest"} and updates[-1] == {"status": "success"}
    blobs = [u for u in updates if "digest" in u]
    assert blobs and all(u["completed"] <= u["total"] for u in blobs)
    assert any(u["completed"] == u["total"] > 90_000_000 for u in blobs)  # the GGUF, whole
    names = [m["name"] for m in httpx.get(server.url + "/api/tags").json()["models"]]
    assert "smol:135m" in names
    ask = {"prompt": "What is the capital of France?", "stream": False}
    stored = httpx.post(server.url + "/api/generate", json={"model": "smol:135m", **ask}, timeout=120).json()
    pinned = httpx.post(server.url + "/api/generate", timeout=120, json={
        "model": "smollm2:135m", "prompt": f"Q: {SYSTEM} {ask['prompt']}\nA:", "raw": True, "stream": False,
        "options": {"temperature": 0, "stop": ["\n"]}}).json()
    assert stored["response"] == pinned["response"]  # the layers did what the explicit request does
    chat = {"messages": [{"role": "user", "content": ask["prompt"]}], "stream": False}
    stored = httpx.post(server.url + "/api/chat", json={"model": "smol:135m", **chat}, timeout=120).json()
    pinned = httpx.post(server.url + "/api/chat", timeout=120, json={
        "model": "smollm2:135m", "messages": [{"role": "system", "content": SYSTEM}] + chat["messages"],
        "stream": False, "options": {"temperature": 0, "stop": ["\n"]}}).json()
    assert stored["message"]["content"] == pinned["message"]["content"]  # chat: the GGUF's template
    shown = httpx.post(server.url + "/api/show", json={"model": "smol:135m"}).json()
    assert shown["details"]["quantization_level"] == "Q4_1"


def test_copy_and_delete_change_the_store(setup):
    server, home = setup
    httpx.post(server.url + "/api/pull", json={"model": "smol:135m", "stream": False}, timeout=120)
    assert httpx.post(server.url + "/api/copy", json={"source": "smol:135m", "destination": "mine:1"}).status_code == 200
    assert httpx.request("DELETE", server.url + "/api/delete", json={"model": "smol:135m"}).status_code == 200
    names = [m["name"] for m in httpx.get(server.url + "/api/tags").json()["models"]]
    assert "mine:1" in names and "smol:135m" not in names
    blobs = list((home / "models" / "blobs").iterdir())
    assert any(b.stat().st_size > 90_000_000 for b in blobs)  # still used by mine:1
    ok = httpx.post(server.url + "/v1/completions", json={"model": "mine:1", "prompt": "Hi", "max_tokens": 2},
                    timeout=120)
    assert ok.status_code == 200
    missing = httpx.post(server.url + "/api/pull", json={"model": "nosuch:1", "stream": False}, timeout=60)
    assert missing.status_code == 400 and "error" in missing.json()
