"""What the gateways call on a worker, without a gateway: SGLang's /generate converter alone, sampling
values at the gateways' "off" on every API, and the control routes, vLLM's /tokenize and /render routes and
the vLLM-named metrics on a real server (a tiny model in a thread of this process)."""
import re
import socket

import httpx
import pytest

from llamay.events import Delta, Finish, Usage
from llamay.server.protocol import anthropic, ollama, openai, sglang
from llamay.server.protocol.base import ProtocolError, ResponseMeta

from conftest import LiveServer


# -- SGLang's /generate, converted alone

def test_generate_parses_sglang_sampling_params_with_its_defaults():
    (req,) = sglang.parse_generate({"text": "hi", "sampling_params": {"top_k": -1, "min_p": 0, "stop": "x",
                                                                      "repetition_penalty": 1.1}})
    assert req.prompt == "hi" and req.raw and req.max_tokens == sglang.DEFAULT_MAX_NEW_TOKENS
    assert req.sampling.top_k == 0 and req.sampling.min_p == 0 and req.sampling.repeat_penalty == 1.1
    assert req.stop == ["x"] and req.run_sampling().temperature == 1.0
    batch = sglang.parse_generate({"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 2}})
    assert [r.prompt for r in batch] == [[1, 2], [3]] and all(r.max_tokens == 2 for r in batch)


@pytest.mark.parametrize("body, param", [
    ({}, "text"), ({"text": "a", "input_ids": [1]}, "text"), ({"input_ids": [-1]}, "input_ids"), ({"input_ids": 5}, "input_ids"), ({"input_ids": {"0": [1]}}, "input_ids"),
    ({"text": "a", "sampling_params": {"top_k": -2}}, "top_k"),
    ({"text": "a", "sampling_params": {"regex": "a+"}}, "sampling_params.regex"),
    ({"text": ["a", "b"], "stream": True}, "stream"), ({"text": "a", "nonsense": 1}, "nonsense"),
    ({"text": ["a"] * (sglang.MAX_PROMPTS + 1)}, "text"), ({"input_ids": [[1]] * (sglang.MAX_PROMPTS + 1)}, "input_ids")])
def test_generate_refuses_what_it_cannot_run_naming_the_field(body, param):
    with pytest.raises(ProtocolError) as e:
        sglang.parse_generate(body)
    assert e.value.status == 400 and e.value.param == param
    assert sglang.error_body(e.value)["error"]["code"] == 400


def test_generate_output_is_sglangs_shape_whole_and_streamed():
    (req,) = sglang.parse_generate({"text": "hi", "stream": True})
    out = sglang.GenerateOutput(req, ResponseMeta("abc", 0, "m"), Usage(2))
    first = out.feed(Delta(0, "Hel", tokens=[5, 6]))
    out.feed(Delta(0, "lo", tokens=[7]))
    last = out.feed(Finish(0, "length", Usage(2, 1, 3)))
    assert first[0].startswith("data: {") and '"text":"Hel"' in first[0]
    assert out.end() == ["data: [DONE]\n\n"]
    body = out.body()
    assert body["text"] == "Hello" and body["output_ids"] == [5, 6, 7] and '"text":"Hello"' in last[0]
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert body["meta_info"]["cached_tokens"] == 1 and body["meta_info"]["prompt_tokens"] == 2


# -- the gateways' "off" sampling values on every API

def test_top_k_minus_one_and_min_p_zero_are_off_on_every_api():
    chat = openai.parse_chat({"messages": [{"role": "user", "content": "x"}], "top_k": -1, "min_p": 0})
    resp = openai.parse_responses({"input": "x", "top_k": -1, "min_p": 0.0})
    claude = anthropic.parse_messages({"model": "m", "max_tokens": 1, "top_k": -1,
                                       "messages": [{"role": "user", "content": "x"}]})
    llama = ollama.parse_generate({"model": "m", "prompt": "x", "options": {"top_k": -1, "min_p": 0}})
    assert [r.sampling.top_k for r in (chat, resp, claude, llama)] == [0, 0, 0, 0]
    with pytest.raises(ProtocolError):
        openai.parse_chat({"messages": [{"role": "user", "content": "x"}], "top_k": -2})


# -- on a real server

@pytest.fixture(scope="module")
def server(tiny_pair):
    s = LiveServer(["-m", str(tiny_pair[0]), "-a", "tiny", "--threads", "1", "-c", "512"])
    yield s
    s.stop()


def test_sglang_control_routes_name_the_served_model_and_its_load(server):
    for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info"):
        info = httpx.get(server.url + path, timeout=30).json()
        assert info["model_path"] == "tiny" and info["is_generation"] is True, path
    load = httpx.get(server.url + "/get_load", timeout=30).json()
    assert load == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": load[0]["num_tokens"]}]
    assert httpx.get(server.url + "/health_generate", timeout=30).status_code == 200
    assert httpx.get(server.url + "/version", timeout=30).json()["version"]


def test_flush_cache_drops_the_prefix_cache(server):
    body = {"prompt": "flush me: " * 10, "max_tokens": 1}
    httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    hit = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["usage"]
    assert hit["prompt_tokens_details"]["cached_tokens"] > 64
    flushed = httpx.post(server.url + "/flush_cache", timeout=30)
    assert flushed.status_code == 200 and int(re.search(r"(\d+) pages", flushed.text)[1]) >= 3
    cold = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()["usage"]
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0


def test_vllm_tokenize_and_detokenize_bodies_beside_llama_servers(server):
    text = "hello world"
    vllm = httpx.post(server.url + "/tokenize", json={"model": "tiny", "prompt": text}, timeout=30).json()
    llama = httpx.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()
    assert vllm["tokens"][-len(llama["tokens"]):] == llama["tokens"] and vllm["count"] == len(vllm["tokens"])
    assert vllm["max_model_len"] == 512
    chat = httpx.post(server.url + "/tokenize", json={"model": "tiny", "messages": [{"role": "user",
                                                                                    "content": text}]}, timeout=30)
    rendered = httpx.post(server.url + "/apply-template", json={"messages": [{"role": "user", "content": text}]},
                          timeout=30).json()["prompt"]
    assert chat.json()["tokens"] == httpx.post(server.url + "/tokenize", json={"content": rendered},
                                               timeout=30).json()["tokens"]
    back = httpx.post(server.url + "/detokenize", json={"model": "tiny", "tokens": llama["tokens"]}, timeout=30)
    assert back.json() == {"content": text, "prompt": text}
    assert httpx.post(server.url + "/detokenize", json={"tokens": llama["tokens"]}, timeout=30).json() == \
        {"content": text}


RENDERED = {"/v1/chat/completions": {"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "hello"}], "max_tokens": 3},
            "/v1/completions": {"prompt": "hello world", "max_tokens": 3, "temperature": 0, "stop": ["\n"]},
            "/v1/responses": {"instructions": "Be brief.", "input": "hello", "max_output_tokens": 3}}


@pytest.mark.parametrize("path", sorted(RENDERED))
def test_vllm_render_answers_the_prompt_ids_the_request_runs(server, path):
    """vLLM's GenerateRequest (completions: a list of one): the token ids are the prompt the same body runs
    (its prompt_tokens, and /tokenize's for the chat template's text), with its sampling under vLLM's names."""
    body = {"model": "tiny", **RENDERED[path]}
    answer = httpx.post(server.url + path + "/render", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    rendered = answer.json()[0] if path == "/v1/completions" else answer.json()
    assert isinstance(answer.json(), list) == (path == "/v1/completions")
    assert set(rendered) == {"request_id", "token_ids", "assistant_tokens_mask", "token_offsets", "features",
                             "sampling_params", "model", "stream", "stream_options", "cache_salt", "priority",
                             "kv_transfer_params"}
    assert rendered["model"] == "tiny" and rendered["stream"] is False and rendered["features"] is None
    run = httpx.post(server.url + path, json=body, timeout=60).json()["usage"]
    assert len(rendered["token_ids"]) == run.get("prompt_tokens", run.get("input_tokens"))
    if path == "/v1/chat/completions":
        assert rendered["token_ids"] == httpx.post(server.url + "/tokenize", json=body, timeout=30).json()["tokens"]
    if path == "/v1/completions":
        assert rendered["token_ids"] == httpx.post(server.url + "/tokenize", json={"content": "hello world"},
                                                   timeout=30).json()["tokens"]
        assert rendered["sampling_params"]["temperature"] == 0 and rendered["sampling_params"]["stop"] == ["\n"]
    params = rendered["sampling_params"]
    assert params["max_tokens"] == 3 and params["n"] == 1 and params["top_k"] == 40  # llama.cpp's default


def test_vllm_render_refuses_as_the_request_would(server):
    too_long = httpx.post(server.url + "/v1/responses/render", json={"input": "x" * 2000}, timeout=30)
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    bad = httpx.post(server.url + "/v1/chat/completions/render", json={"messages": []}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


def test_vllm_named_metrics_carry_the_servers_values(server):
    httpx.post(server.url + "/v1/completions", json={"prompt": "metrics", "max_tokens": 1}, timeout=60)
    text = httpx.get(server.url + "/metrics", timeout=30).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("vllm:"))
    view = server.registry.loaded["tiny"].llm.kv_view()
    assert float(values['vllm:kv_cache_usage_perc{model_name="tiny"}']) == (view.n_total - view.n_free) / view.n_total
    assert values['vllm:num_requests_running{model_name="tiny"}'] == "0"
    assert values['vllm:num_requests_waiting{model_name="tiny"}'] == "0"
    config = next(k for k in values if k.startswith("vllm:cache_config_info"))
    assert f'block_size="{view.page_size}"' in config and f'num_gpu_blocks="{view.n_total}"' in config
    own = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("llamay_prompt"))
    assert values["vllm:prefix_cache_queries_total"] == own["llamay_prompt_tokens_total"]
    assert values["vllm:prefix_cache_hits_total"] == own["llamay_prompt_cache_hit_tokens_total"]


def _preface(url: str) -> bytes:
    """HTTP/2's connection preface on a raw socket, as smg's gRPC probe opens (prior knowledge) -> the reply."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        return sock.recv(4096)


def test_an_http2_preface_is_a_505_not_a_missing_route_even_under_a_key(server, tiny_pair):
    assert _preface(server.url).startswith(b"HTTP/1.1 505 ")
    keyed = LiveServer(["-m", str(tiny_pair[0]), "--threads", "1", "-c", "128", "--api-key", "k"])
    try:
        assert _preface(keyed.url).startswith(b"HTTP/1.1 505 ")
        assert httpx.get(keyed.url + "/v1/models", timeout=10).status_code == 401  # the key still guards the rest
    finally:
        keyed.stop()
