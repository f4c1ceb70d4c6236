"""llama-server's stream telemetry and post-sampling probabilities on `llamay serve`, over HTTP as llama.cpp's
own server tests drive them (test_chat_completion's test_return_progress, test_metrics'
test_metrics_timings_on_prompt_progress, test_compat_oai_responses' telemetry test, test_completion's
test_n_probs_post_sampling): `prompt_progress` chunks while the prompt is computed (return_progress),
`timings` on every chunk (timings_per_token), `prob`/`top_probs` of the distribution each token was drawn
from (post_sampling_probs). The server computes 32 prompt tokens a pass (-b 32), so the counts are exact."""
import json
import math

import httpx
import pytest
from conftest import LiveServer

pytestmark = pytest.mark.model
HTTP = httpx.Client(timeout=120)
BATCH = 32


@pytest.fixture(scope="module")
def srv(smollm_path):
    server = LiveServer(["-m", str(smollm_path), "--threads", "2", "-c", "1024", "-np", "1", "-b", str(BATCH)])
    yield server.url
    server.stop()


def stream(url: str, path: str, **body) -> list[dict]:
    """The data payloads of a stream (SSE `data:` lines, [DONE] left out)."""
    r = HTTP.post(url + path, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    lines = [line for line in r.text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]
    return [json.loads(line[len("data: "):]) for line in lines]


def n_tokens(url: str, text: str) -> int:
    return len(HTTP.post(url + "/tokenize", json={"content": text}).json()["tokens"])


def chunked(total: int, cached: int = 0) -> list[int]:
    """processed, report by report: the start, then after each pass of BATCH prompt tokens."""
    return [cached] + [min(n, total) for n in range(cached + BATCH, total + BATCH, BATCH)]


def test_completion_stream_reports_prompt_progress_then_timings_on_every_chunk(srv):
    prompt = "the quick brown fox jumps over the lazy dog " * 8
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0}
    chunks = stream(srv, "/completion", **body, return_progress=True, timings_per_token=True)
    whole = HTTP.post(srv + "/completion", json=body).json()
    progress = [c for c in chunks if "prompt_progress" in c]
    assert chunks[:len(progress)] == progress  # all before the first token
    total, cache = n_tokens(srv, prompt), 0  # nothing of it cached yet
    assert [p["prompt_progress"]["processed"] for p in progress] == chunked(total) == [0, 32, 64, total]
    for p in progress:
        assert {k: p["prompt_progress"][k] for k in ("total", "cache")} == {"total": total, "cache": cache}
        assert (p["content"], p["tokens"], p["stop"], p["tokens_predicted"], p["tokens_evaluated"]) == \
            ("", [], False, 0, total)
        assert p["timings"]["prompt_n"] == p["prompt_progress"]["processed"] - cache
        assert p["timings"]["predicted_n"] == 0 and p["timings"]["cache_n"] == cache
    assert progress[0]["timings"]["prompt_ms"] == 0.0
    assert all(isinstance(v, (int, float)) and v >= 0 for p in progress for v in p["timings"].values())
    parts = [c for c in chunks[len(progress):] if not c["stop"]]
    assert "".join(p["content"] for p in parts) == whole["content"]
    assert [p["timings"]["predicted_n"] for p in parts] == [p["tokens_predicted"] for p in parts]
    assert parts[-1]["tokens_predicted"] == 4 and chunks[-1]["stop"] is True


def test_chat_stream_progress_is_a_role_chunk_and_a_repeat_starts_at_its_cache(srv):
    messages = [{"role": "user", "content": "This is a test" * 10}]
    plain = stream(srv, "/v1/chat/completions", messages=messages, max_tokens=3, temperature=0)
    assert not any("prompt_progress" in c or "timings" in c for c in plain[:-1])
    again = stream(srv, "/v1/chat/completions", messages=messages, max_tokens=3, temperature=0, return_progress=True)
    progress = [c for c in again if "prompt_progress" in c]
    assert [c["choices"][0]["delta"] for c in progress] == [{"role": "assistant", "content": None}] * len(progress)
    total = progress[0]["prompt_progress"]["total"]
    # all of it was cached, with the logits at its end: one progress chunk, nothing computed
    assert [c["prompt_progress"]["processed"] for c in progress] == [total]
    assert {c["prompt_progress"]["cache"] for c in progress} == {total}
    assert not any("timings" in c for c in progress)  # timings_per_token not asked
    text = [c["choices"][0]["delta"].get("content") for c in again[len(progress):] if c["choices"]]
    assert "".join(t for t in text if t) == "".join(c["choices"][0]["delta"].get("content") or ""
                                                    for c in plain if c["choices"])


def test_v1_completions_stream_reports_progress_in_empty_chunks(srv):
    prompt = "one two three four five six seven eight nine ten " * 5
    chunks = stream(srv, "/v1/completions", prompt=prompt, max_tokens=2, temperature=0, return_progress=True,
                    timings_per_token=True)
    progress = [c for c in chunks if "prompt_progress" in c]
    total, cache = n_tokens(srv, prompt), progress[0]["prompt_progress"]["cache"]
    assert [c["prompt_progress"]["processed"] for c in progress] == chunked(total, cache) and total - cache > BATCH
    assert all(c["choices"] == [{"text": "", "index": 0, "logprobs": None, "finish_reason": None}] for c in progress)
    texts = [c for c in chunks[len(progress):] if c["choices"][0]["text"]]
    assert texts and all(c["timings"]["predicted_n"] >= 1 for c in texts)


def test_responses_stream_carries_progress_on_in_progress_events_and_timings(srv):
    text = "Count the words in this sentence, please. " * 6
    events = stream(srv, "/v1/responses", input=text, max_output_tokens=4, temperature=0, return_progress=True,
                    timings_per_token=True)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    progress = [e for e in events if "prompt_progress" in e]
    assert {e["type"] for e in progress} == {"response.in_progress"} and progress[0] is events[1]
    processed, first = [e["prompt_progress"]["processed"] for e in progress], progress[0]["prompt_progress"]
    assert processed == chunked(first["total"], first["cache"]) and len(processed) > 2
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("prompt_per_second" in e["timings"] for e in deltas)
    assert [e["timings"]["predicted_n"] for e in deltas] == sorted(e["timings"]["predicted_n"] for e in deltas)
    last = events[-1]
    assert last["type"] in ("response.completed", "response.incomplete")
    assert last["timings"]["predicted_n"] == last["response"]["usage"]["output_tokens"]


def test_post_sampling_probs_are_of_the_distribution_drawn_from(srv):
    body = {"prompt": "Today was the day. Today I would finally become a", "n_predict": 5, "seed": 42,
            "temperature": 1.0}
    raw = HTTP.post(srv + "/completion", json={**body, "n_probs": 10}).json()
    post = HTTP.post(srv + "/completion", json={**body, "n_probs": 50, "post_sampling_probs": True}).json()
    assert post["content"] == raw["content"]  # asking changes no token
    for tok, before in zip(post["completion_probabilities"], raw["completion_probabilities"]):
        assert set(tok) == {"id", "token", "bytes", "prob", "top_probs"} and tok["id"] == before["id"]
        probs = [p["prob"] for p in tok["top_probs"]]
        assert all(0 < p <= 1 for p in probs) and probs == sorted(probs, reverse=True)
        assert len(probs) <= 40 and sum(probs) == pytest.approx(1.0)  # every survivor of top_k 40
        drawn = {p["id"]: p["prob"] for p in tok["top_probs"]}
        assert drawn[tok["id"]] == pytest.approx(tok["prob"])
        assert tok["prob"] >= math.exp(before["logprob"]) - 1e-9  # renormalised over fewer tokens
    greedy = HTTP.post(srv + "/completion", json={**body, "temperature": 0, "n_probs": 3,
                                                  "post_sampling_probs": True}).json()
    for tok in greedy["completion_probabilities"]:
        assert tok["prob"] == 1.0 and tok["top_probs"] == [{k: tok[k] for k in ("id", "token", "bytes", "prob")}]


def test_chat_logprobs_with_post_sampling_probs_take_llama_servers_names(srv):
    got = HTTP.post(srv + "/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 3, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, "post_sampling_probs": True}).json()
    content = got["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    assert all(t["prob"] == 1.0 and [p["id"] for p in t["top_probs"]] == [t["id"]] for t in content)
