"""`llamay serve` on a hybrid model (a tiny LFM2 written by llama.cpp's converter): completions, the prefix
cache resuming from a state checkpoint, and the context routes (create, fork, generate, snapshot download
and restore) giving the same greedy text as one plain completion, with the KV pages and state slots checked
after each test."""
import re

import httpx
import pytest
from openai.types import Completion

import hybrid_shortconv
from arch_models import build, convert
from conftest import CACHE, LiveServer

CASE = hybrid_shortconv.CASES["lfm2"]
PROMPT = " ".join(f"w{i}" for i in range(20))  # ~80 tokens of the tiny vocabulary
GREEDY = {"max_tokens": 10, "temperature": 0}
OCTET = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    return convert({"lfm2": (CASE, build(CASE))}, tmp_path_factory.mktemp("hybrid-server"), CACHE)["lfm2"]


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hybrid-slots")


@pytest.fixture(scope="module")
def server(model_file, slot_dir):
    server = LiveServer(["-m", str(model_file), "--threads", "2", "-c", str(CASE.n_ctx), "--slot-save-path",
                         str(slot_dir)])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture
def made(http, server):
    ids: list[str] = []
    yield ids
    for cid in ids:
        assert http.delete(f"/v1/contexts/{cid}").status_code in (200, 404)
    server.check_pages()


def complete(http, prompt: str, **body) -> dict:
    r = http.post("/v1/completions", json={"prompt": prompt, **GREEDY, **body})
    assert r.status_code == 200, r.text
    return r.json()


def text_of(out: dict) -> str:
    return Completion.model_validate(out).choices[0].text


def post(http, made, url: str, status: int = 201, **kw) -> dict:
    r = http.post(url, **kw)
    assert r.status_code == status, r.text
    out = r.json()
    made.extend(out.get("ids", [out["id"]] if "id" in out and url.endswith("contexts") else []))
    return out


def test_a_repeated_prompt_is_answered_alike_from_a_checkpoint(http, server):
    first = complete(http, PROMPT)
    again = complete(http, PROMPT)
    assert text_of(first) and text_of(again) == text_of(first)
    usage = again["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"]  # with its last logits
    server.check_pages()
    metrics = http.get("/metrics").text  # the state's slots and checkpoints, also in the Studio's view
    assert re.search(r"^llamay_state_checkpoints [1-9]", metrics, re.M)
    assert re.search(r"^llamay_state_checkpoint_bytes [1-9]", metrics, re.M)
    kv = next(iter(http.get("/studio/api/contexts").json()["kv"].values()))
    assert kv["state_bytes_per_context"] > 0 and kv["state_checkpoints"] >= 1


def test_context_routes_fork_and_snapshots_continue_exactly(http, made):
    reference = text_of(complete(http, PROMPT + " next"))
    ctx = post(http, made, "/v1/contexts", json={"prompt": PROMPT + " next"})
    snap = http.get(f"/v1/contexts/{ctx['id']}/snapshot")
    assert snap.status_code == 200, snap.text
    kids = post(http, made, f"/v1/contexts/{ctx['id']}/fork", params={"n": 2})["ids"]
    for cid in (ctx["id"], *kids):
        out = post(http, made, f"/v1/contexts/{cid}/generate", status=200, json=GREEDY)
        assert text_of(out) == reference
    back = post(http, made, "/v1/contexts", content=snap.content, headers=OCTET)
    again = post(http, made, f"/v1/contexts/{back['id']}/generate", status=200, json=GREEDY)
    assert text_of(again) == reference
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"]


def test_a_slot_saved_on_one_server_restores_on_another(http, server, model_file, slot_dir):
    """llama-server's /slots save and restore carry the recurrent state: the restored slot's tokens are
    cache hits on a server that never computed them, and the text continues as on the first."""
    prompt = PROMPT + " slot"
    first = http.post("/completion", json={"prompt": prompt, "id_slot": 1, "n_predict": 4, "temperature": 0,
                                           "return_tokens": True}).json()
    saved = http.post("/slots/1?action=save", json={"filename": "h.bin"}).json()
    assert saved["n_saved"] == first["tokens_evaluated"] + first["tokens_predicted"]
    fresh = LiveServer(["-m", str(model_file), "--threads", "2", "-c", str(CASE.n_ctx), "--slot-save-path",
                        str(slot_dir)])
    try:
        with httpx.Client(base_url=fresh.url, timeout=120) as other:
            assert other.post("/slots/0?action=restore", json={"filename": "h.bin"}).json()["n_restored"] == \
                saved["n_saved"]
            longer = other.post("/tokenize", json={"content": prompt}).json()["tokens"] + first["tokens"]
            after = other.post("/completion", json={"prompt": longer + [5], "id_slot": 0, "n_predict": 6,
                                                    "temperature": 0}).json()
            assert after["timings"]["cache_n"] == saved["n_saved"]
            want = http.post("/completion", json={"prompt": longer + [5], "n_predict": 6, "temperature": 0}).json()
            assert after["content"] == want["content"]
        fresh.check_pages()
    finally:
        fresh.stop()
