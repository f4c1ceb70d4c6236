"""Two `llamay serve` workers (subprocesses, each with --peers naming the other and one --api-key) behind the
real SGLang Model Gateway (smg, sglang-router 0.3.2) and the real vllm-router 0.1.17, each with --policy
cache_aware and the workers' key: the worker registers under its model's name, every API the gateway carries
answers, a shared prefix keeps to one worker (cached tokens; vllm-router reads /render's ids), a named context
is reachable through the gateway whichever worker it lands on, and a killed worker costs no request made after
the kill, every answer the same as before it. Skipped where a gateway is not installed."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import llamay

from conftest import free_port

GATEWAYS = {"smg": "sglang_router", "vllm": "vllm_router"}
PREFIX = "You are a careful assistant who answers in one line and never more than that, whatever is asked. " * 2
KEY = "gateway-test-key"  # the workers' --api-key, given to each gateway's --api-key (docs/GATEWAYS.md)
AUTH = {"authorization": f"Bearer {KEY}"}
# a request to a dead worker fails over only if its breaker opens before the request's retries (attempts in
# all) run out; the default of 10 failures let 2 requests fail (docs/GATEWAYS.md, "A dead worker")
RESILIENCE = ["--cb-failure-threshold", "3", "--retry-max-retries", "5"]


def _poll(check, what: str, tries: int = 600, every: float = 0.1):
    """check() until it returns a truthy value (bounded: tries x every seconds)."""
    last = None
    for _ in range(tries):
        try:
            value = check()
            if value:
                return value
        except (httpx.HTTPError, ValueError) as e:
            last = e
        time.sleep(every)
    raise AssertionError(f"{what} did not happen ({last})")


class Worker:
    def __init__(self, model: Path, port: int, peer: int, log: Path):
        self.port, self.url, self.log = port, f"http://127.0.0.1:{port}", log
        env = {**os.environ, "PYTHONPATH": str(Path(llamay.__file__).parent.parent)}  # the llamay under test
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from llamay.cli.main import main; main()", "serve", "-m", str(model),
             "-a", "tiny", "--threads", "1", "-c", "512", "--port", str(port), "--peers", f"http://127.0.0.1:{peer}",
             "--api-key", KEY],
            stdout=subprocess.DEVNULL, stderr=open(log, "w"), env=env)

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def _gateway_argv(kind: str, port: int, urls: list[str]) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls, "--policy", "cache_aware",
              "--prometheus-port", str(free_port()), "--retry-initial-backoff-ms", "20",
              "--retry-max-backoff-ms", "200", "--api-key", KEY, *RESILIENCE]
    if kind == "smg":
        return [shutil.which("smg") or "smg", "launch", *common]
    return [sys.executable, "-m", "vllm_router.launch_router", *common]


@pytest.fixture(scope="module", params=sorted(GATEWAYS))
def stack(request, tiny_pair, tmp_path_factory):
    kind = request.param
    pytest.importorskip(GATEWAYS[kind], reason=f"{GATEWAYS[kind]} is not installed (pip install -e .[test])")
    folder = tmp_path_factory.mktemp(f"gw-{kind}")
    ports = [free_port(), free_port()]
    workers = [Worker(tiny_pair[0], ports[i], ports[1 - i], folder / f"worker{i}.log") for i in range(2)]
    for w in workers:
        _poll(lambda: httpx.get(w.url + "/health", timeout=2).status_code == 200, f"worker {w.url} up")
    port = free_port()
    gw_log = open(folder / "gateway.log", "w")
    gateway = subprocess.Popen(_gateway_argv(kind, port, [w.url for w in workers]), stdout=gw_log,
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _poll(lambda: _ask(url, "/v1/completions", {"model": "tiny", "prompt": "warm", "max_tokens": 1}).status_code
          == 200, f"{kind} serving")
    yield kind, url, workers
    gateway.terminate()
    gateway.wait(timeout=30)
    for w in workers:
        if w.proc.poll() is None:
            w.proc.terminate()
            w.proc.wait(timeout=30)


def _ask(url, path, body, headers=AUTH):
    return httpx.post(url + path, json=body, timeout=60, headers=headers)


def test_the_worker_registers_with_its_model_name_and_every_probe_is_answered(stack):
    kind, url, workers = stack
    if kind == "smg":  # smg lists the models its workers registered with (it was "unknown")
        assert [m["id"] for m in httpx.get(url + "/v1/models", timeout=10, headers=AUTH).json()["data"]] == ["tiny"]
    refused = [line for w in workers for line in w.lines() if re.search(r" - 4\d\d ", line)]
    assert not refused, refused  # smg 0.3.2's gRPC probe (an HTTP/2 preface) gets a 505, then it uses HTTP


def test_with_the_workers_key_each_gateway_reaches_every_route(stack):
    """--api-key (the workers' key) given to the gateway: smg checks a client's key itself and sends its own
    on its probes; vllm-router passes a client's key on its OpenAI routes and puts its own in place of the
    client's on every route it passes through, which any client then reaches without a key."""
    kind, url, _ = stack
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert _ask(url, "/v1/chat/completions", chat, headers={}).status_code == 401
    assert _ask(url, "/v1/chat/completions", chat).status_code == 200
    if kind == "vllm":
        claude = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
        assert _ask(url, "/v1/messages", claude).status_code == 200
        assert _ask(url, "/v1/messages", claude, headers={}).status_code == 200


def test_every_api_the_gateway_carries_answers(stack):
    kind, url, _ = stack
    chat = _ask(url, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                              "max_tokens": 3, "temperature": 0})
    assert chat.status_code == 200 and chat.json()["object"] == "chat.completion", chat.text
    done = _ask(url, "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 3, "temperature": 0})
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 3, done.text
    resp = _ask(url, "/v1/responses", {"input": "hi", "max_output_tokens": 3, "temperature": 0})  # smg adds top_k -1
    assert resp.status_code == 200 and resp.json()["object"] == "response", resp.text
    whole = _ask(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                                      "ignore_eos": True}})
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert body["meta_info"]["completion_tokens"] == 4 == len(body["output_ids"])
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    with httpx.stream("POST", url + "/generate", timeout=60, headers=AUTH, json={
            "text": "hi", "stream": True, "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                              "ignore_eos": True}}) as r:
        frames = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    last = json.loads(frames[-2])
    assert last["text"] == body["text"] and last["output_ids"] == body["output_ids"]  # SGLang: text so far


# each API with the shared prefix first: path, body for question i, its cached prompt tokens
SHARED = {"completions": ("/v1/completions", lambda i: {"model": "tiny", "prompt": f"{PREFIX}question {i}?"},
                          lambda u: u["prompt_tokens_details"]["cached_tokens"]),
          "chat": ("/v1/chat/completions", lambda i: {"model": "tiny", "messages": [
              {"role": "system", "content": "Chat. " + PREFIX}, {"role": "user", "content": f"question {i}?"}]},
                   lambda u: u["prompt_tokens_details"]["cached_tokens"]),
          "responses": ("/v1/responses", lambda i: {"model": "tiny", "instructions": "Responses. " + PREFIX,
                                                    "input": f"question {i}?"},
                        lambda u: u["input_tokens_details"]["cached_tokens"])}


@pytest.mark.parametrize("api", sorted(SHARED))
def test_a_shared_prefix_keeps_to_one_worker_and_reuses_its_pages(stack, api):
    """Agents sharing a long system prompt, turns at once after the first: each finds it cached on the
    worker it lands on (by load alone, some would land on the other; vllm-router places chat and responses by
    the ids /render answers)."""
    kind, url, _ = stack
    path, body, cached_of = SHARED[api]
    ask = lambda i: _ask(url, path, {**body(i), "max_tokens" if api != "responses" else "max_output_tokens": 1})
    with ThreadPoolExecutor(7) as pool:
        answers = [ask(0)] + list(pool.map(ask, range(1, 8)))
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    cached = [cached_of(r.json()["usage"]) for r in answers]
    hits = sum(c >= len(PREFIX.encode()) for c in cached[1:])  # the tiny model's tokens are bytes
    print(f"{kind} cache_aware, {api}: {hits}/7 later prompts found the prefix cached ({cached})")
    assert hits == 7, cached


def _create(url, prompt):
    r = _ask(url, "/v1/contexts", {"model": "tiny", "prompt": prompt})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_named_contexts_are_served_through_the_gateway_whichever_worker_it_picks(stack):
    kind, url, workers = stack
    # smg carries only the OpenAI routes: contexts are made on a worker and continued with
    # /v1/completions {"context": ID}; vllm-router passes /v1/contexts through to a worker it picks by load
    # contexts on both workers: the gateway's choice for a request cannot follow both
    ids = [_create(w.url, f"context {i} of {kind}: ") for i, w in enumerate(workers)]
    if kind == "vllm":
        ids.append(_create(url, f"context 2 of {kind}: "))
    else:
        ids.append(_create(workers[0].url, f"context 2 of {kind}: "))
    answers, forwarded = [], 0
    for step in range(8):
        for cid in ids:
            if kind == "smg":
                r = _ask(url, "/v1/completions", {"model": "tiny", "context": cid, "prompt": f" {step}",
                                                  "max_tokens": 1, "temperature": 0})
            else:
                r = _ask(url, f"/v1/contexts/{cid}/generate", {"prompt": f" {step}", "max_tokens": 1,
                                                             "temperature": 0})
            assert r.status_code == 200, (cid, r.text)
            answers.append(r.json()["usage"]["prompt_tokens"])
            forwarded += "x-llamay-context-holder" in r.headers  # it reached the other worker, which passed it on
    if kind == "vllm":  # forks, and a fork's continuation, through the gateway
        kids = _ask(url, f"/v1/contexts/{ids[0]}/fork?n=2", {})
        assert kids.status_code == 201, kids.text
        for kid in kids.json()["ids"]:
            r = _ask(url, f"/v1/contexts/{kid}/generate", {"prompt": " fork", "max_tokens": 1, "temperature": 0})
            assert r.status_code == 200, r.text
    assert len(answers) == 24
    print(f"{kind}: {forwarded} of 24 context requests reached the worker not holding the context")
    assert forwarded >= 1
    logged = [line for w in workers for line in w.lines()]
    assert not any("no context" in line for line in logged)
    # each continuation's prompt is the context so far: it grew by every earlier step, on whichever worker
    per_ctx = [answers[i::3] for i in range(3)]
    assert all(b > a for seq in per_ctx for a, b in zip(seq, seq[1:])), per_ctx


def _completion(url, prompt, max_tokens):
    return _ask(url, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                                         "temperature": 0, "ignore_eos": True})


def test_a_killed_worker_costs_at_most_its_requests_in_flight(stack):
    """With the breaker opening before the gateway's retries run out (RESILIENCE), a request the gateway
    sends to the dead worker is retried on the survivor: the client (which never retries) may see an error
    for a request in flight at the kill, none for a later one (with the default threshold the first two to the
    dead worker failed), and every answer is the one from before the kill (greedy: the same on either worker)."""
    kind, url, workers = stack
    prompts = [f"failover {i}: the quick brown fox" for i in range(8)]
    before = [_completion(url, p, 6) for p in prompts]
    assert all(r.status_code == 200 for r in before), [r.text for r in before]
    with ThreadPoolExecutor(2) as pool:  # 400 tokens each, on both workers (the second placed by load)
        running = [pool.submit(_completion, url, f"{word} is in flight: jumps over the lazy dog", 400)
                   for word in ("alpha", "bravo")]
        time.sleep(0.2)
        workers[1].kill()
        in_flight = [f.result().status_code for f in running]
    after = [_completion(url, p, 6) for p in prompts]
    print(f"{kind}: the requests in flight at the kill answered {in_flight}; "
          f"{sum(r.status_code != 200 for r in after)} of {len(after)} later ones failed")
    assert all(status == 200 or status >= 500 for status in in_flight), in_flight
    assert [r.status_code for r in after] == [200] * len(after), [r.text for r in after]
    assert [r.json()["choices"][0]["text"] for r in after] == [r.json()["choices"][0]["text"] for r in before]
