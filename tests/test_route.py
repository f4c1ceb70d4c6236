"""`llamay route` over two real `llamay serve` servers (threads of this process on a tiny model): a shared
prefix stays on one server and reuses its pages there, different prefixes spread, streams pass through,
named contexts follow their server, a dead server is failed over (and, with a shared Redis tier, the
survivor answers the dead one's prefix without prefilling it). The ring and the keys are checked alone."""
import json
import time
from dataclasses import replace

import httpx
import pytest

from llamay.route.app import BACKEND_HEADER, create_app
from llamay.route.keys import route_key
from llamay.route.ring import Ring
from llamay.settings import ROUTE

from conftest import LiveServer
from server_thread import AppThread

# checks every 0.2 s; a loaded machine's slow answer is not a dead server (one that is dead refuses at once)
FAST = replace(ROUTE, health_interval=0.2, health_timeout=30.0)
PREFIX = "You are a careful assistant who answers in one line. " * 4  # ~200 characters: past the key's


# -- the ring and the keys, alone

def test_the_ring_orders_every_backend_once_and_moves_only_the_keys_of_one_that_leaves():
    names = [f"http://10.0.0.{i}:11435" for i in range(4)]
    ring, three = Ring(names, 64), Ring(names[:3], 64)
    keys = [f"k{i}".encode() for i in range(2000)]
    owners = [ring.order(k)[0] for k in keys]
    assert all(sorted(ring.order(k)) == sorted(names) for k in keys[:50])
    share = {n: owners.count(n) / len(keys) for n in names}
    assert all(0.15 < s < 0.35 for s in share.values()), share
    moved = [k for k, o in zip(keys, owners) if o != names[3] and three.order(k)[0] != o]
    assert moved == []  # only the keys names[3] owned went elsewhere


def test_bounded_loads_spill_a_hot_key_to_the_next_backend():
    ring = Ring(["a", "b"], 64)
    key = next(f"k{i}".encode() for i in range(100) if ring.order(f"k{i}".encode())[0] == "a")
    loads = {"a": 0, "b": 0}
    assert ring.choose(key, lambda n: True, loads.get, 1.25)[0] == "a"
    loads["a"] = 3  # cap = ceil(1.25 * (3 + 1) / 2) = 3: a is full
    assert ring.choose(key, lambda n: True, loads.get, 1.25) == ["b", "a"]
    assert ring.choose(key, lambda n: n != "b", loads.get, 1.25) == ["a", "b"]  # over the bound, but the only one up


def test_the_key_is_the_model_and_the_first_page_of_the_prompt():
    def chat(*contents, model="m", system=None):
        body = {"model": model, "messages": [{"role": "user", "content": c} for c in contents]}
        if system is not None:
            body["system"] = system
        return route_key(json.dumps(body).encode(), 128)

    assert chat(PREFIX + "a") == chat(PREFIX + "b") == chat(PREFIX, "later turn")  # past 128 characters
    assert chat("short a") != chat("short b")
    assert chat(PREFIX, model="m") != chat(PREFIX, model="n")
    assert chat("x", system="S") == chat("x", system=[{"type": "text", "text": "S"}])  # Anthropic's two shapes
    assert route_key(b'{"prompt": [1, 2, 3]}', 128) != route_key(b'{"prompt": [1, 2, 4]}', 128)
    assert route_key(b"\xff not json", 128) != route_key(b"\xfe not json", 128)  # keyed on its bytes
    deep = b"[" * 100_000 + b"]" * 100_000  # past the JSON parser's depth: keyed, not a 500
    assert route_key(deep, 128) == route_key(deep, 128) != route_key(b"[]", 128)


# -- over two real servers

def tiny_servers(path, *extra):
    return [LiveServer(["-m", str(path), "--threads", "1", "-c", "512", *extra]) for _ in range(2)]


@pytest.fixture(scope="module")
def routed(tiny_pair):
    servers = tiny_servers(tiny_pair[0])
    front = AppThread(create_app([s.url for s in servers], FAST))
    yield front.url, servers
    front.stop()
    for s in servers:
        s.stop()


def complete(url, prompt, **kw):
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0, **kw},
                   timeout=60)
    assert r.status_code == 200, r.text
    return r


def test_a_shared_prefix_stays_on_one_server_and_reuses_its_pages(routed):
    url, servers = routed
    answers = [complete(url, PREFIX + tail) for tail in ("one?", "two?", "three?")]
    assert len({r.headers[BACKEND_HEADER] for r in answers}) == 1
    assert answers[0].headers[BACKEND_HEADER] in [s.url for s in servers]
    cached = [r.json()["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in answers]
    assert cached[1] >= 128 and cached[2] >= 128  # the later prompts reused the first one's pages


def test_different_prefixes_spread_over_both_servers(routed):
    url, servers = routed
    seen = {complete(url, f"{i} is a number I like.").headers[BACKEND_HEADER] for i in range(12)}
    assert seen == {s.url for s in servers}


def test_a_stream_passes_through_as_the_server_sent_it(routed):
    url, _ = routed
    body = {"prompt": "Stream this: ", "max_tokens": 6, "temperature": 0}
    whole = complete(url, body["prompt"], max_tokens=6)
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        server = r.headers[BACKEND_HEADER]
        frames = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "data: [DONE]"
    text = "".join(c["text"] for f in frames[:-1] for c in json.loads(f[6:])["choices"])
    assert text == whole.json()["choices"][0]["text"] and server == whole.headers[BACKEND_HEADER]


def test_named_contexts_follow_the_server_holding_them(routed):
    url, servers = routed
    made = [httpx.post(url + "/v1/contexts", json={"prompt": f"context {i}: "}, timeout=60) for i in range(6)]
    assert all(r.status_code == 201 for r in made)
    homes = {r.json()["id"]: r.headers[BACKEND_HEADER] for r in made}
    assert len(set(homes.values())) == 2  # both servers hold some
    for cid, home in homes.items():
        r = httpx.post(f"{url}/v1/contexts/{cid}/generate", json={"max_tokens": 2, "temperature": 0}, timeout=60)
        assert r.status_code == 200 and r.headers[BACKEND_HEADER] == home, r.text
    cid = next(iter(homes))
    fork = httpx.post(f"{url}/v1/contexts/{cid}/fork", json={"n": 2}, timeout=60)
    assert fork.status_code == 201, fork.text
    for new in fork.json()["ids"]:
        assert httpx.get(f"{url}/v1/contexts/{new}", timeout=60).headers[BACKEND_HEADER] == homes[cid]
    listed = {c["id"] for c in httpx.get(url + "/v1/contexts", timeout=60).json()["data"]}
    assert listed == set(homes) | set(fork.json()["ids"])
    for cid in listed:
        assert httpx.delete(f"{url}/v1/contexts/{cid}", timeout=60).status_code == 200
    assert httpx.get(f"{url}/v1/contexts/{cid}", timeout=60).status_code == 404
    assert all(s.check_pages() == 0 for s in servers)


def test_the_front_keeps_the_guard_and_answers_for_itself(routed):
    url, servers = routed
    r = httpx.get(url + "/v1/models", headers={"host": "evil.example"}, timeout=60)
    assert r.status_code == 403 and "not allowed" in r.json()["error"]["message"]
    assert httpx.get(url + "/health", timeout=60).json() == {"status": "ok", "backends_up": 2}
    status = httpx.get(url + "/route/backends", timeout=60).json()
    assert sorted(b["url"] for b in status["backends"]) == sorted(s.url for s in servers)
    assert all(b["up"] for b in status["backends"])
    assert 'llamay_route_backend_up{backend="' + servers[0].url + '"} 1' in httpx.get(url + "/metrics", timeout=60).text


def test_a_dead_server_is_failed_over_and_the_survivor_reads_its_pages_from_redis(tiny_pair, redis_url):
    servers = tiny_servers(tiny_pair[0], "--cache-redis", redis_url[0])
    front = AppThread(create_app([s.url for s in servers], replace(FAST, health_interval=600)))  # no check sees it
    try:
        prompt = PREFIX + "What is two plus two?"
        first = complete(front.url, prompt)
        home = next(s for s in servers if s.url == first.headers[BACKEND_HEADER])
        for loaded in home.registry.loaded.values():
            assert loaded.llm.cache.flush(30)  # its pages are in Redis
        home.stop()
        again = complete(front.url, prompt)  # at once: before a health check has seen it go
        assert again.headers[BACKEND_HEADER] != home.url
        assert again.json()["choices"][0]["text"] == first.json()["choices"][0]["text"]
        assert again.json()["usage"]["llamay"]["cached_shared_tokens"] >= 128  # not prefilled again
        status = httpx.get(front.url + "/route/backends", timeout=60).json()
        assert [b["up"] for b in status["backends"] if b["url"] == home.url] == [False]
        assert status["failovers"] >= 1
        assert httpx.get(front.url + "/health", timeout=60).json()["backends_up"] == 1
    finally:
        front.stop()
        for s in servers:
            s.stop()


def test_health_checks_take_a_server_out_and_none_up_is_a_502_in_the_api_shape(tiny_pair):
    servers = tiny_servers(tiny_pair[0])
    front = AppThread(create_app([s.url for s in servers], FAST))
    try:
        servers[0].stop()
        deadline = time.monotonic() + 10
        while httpx.get(front.url + "/health", timeout=60).json()["backends_up"] != 1:  # no request has seen it: a check
            assert time.monotonic() < deadline, "the health checks never saw the server go"
            time.sleep(0.05)
        servers[1].stop()
        r = httpx.post(front.url + "/v1/messages", json={"model": "m", "max_tokens": 2,
                                                         "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 502 and r.json()["type"] == "error"  # Anthropic's error shape
        assert "no backend could take the request" in r.json()["error"]["message"]
        assert httpx.get(front.url + "/health", timeout=60).status_code == 503  # both were found down
    finally:
        front.stop()


@pytest.mark.parametrize("argv, says", [
    (["ftp://127.0.0.1:1"], "a backend is an http:// or https:// address"),
    (["http://127.0.0.1:1", "http://127.0.0.1:1/"], "a backend is named twice"),
    (["http://127.0.0.1:1", "--load-factor", "0.5"], "--load-factor must be at least 1"),
])
def test_route_refuses_bad_flags_in_one_line(capsys, argv, says):
    from llamay.cli.main import main
    assert main(["route", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("llamay: error: ") and says in err and err.count("\n") == 1


@pytest.mark.model
def test_a_client_that_leaves_mid_stream_cancels_the_generation_on_its_server(live_server, model, monkeypatch):
    from test_server_wire import wait_for
    from test_server_wire_load import watch_endings
    front = AppThread(create_app([live_server.url], FAST))
    try:
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": 400, "stream": True}
        with httpx.Client(timeout=30) as client, client.stream("POST", front.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(6)]  # a few tokens in, far from the 400 asked
            sched = live_server.registry.loaded[model].scheduler
            ended = watch_endings(monkeypatch, sched)
            assert sched.n_running == 1 and "[DONE]" not in "".join(seen)
        wait_for(lambda: bool(ended), what="the generation to end")
        assert ended[0][0] == "cancelled" and ended[0][1] < 400, ended
        wait_for(lambda: front.app.state.router.backends[live_server.url].in_flight == 0, what="the front to let go")
    finally:
        front.stop()


def test_a_body_past_the_fronts_bound_is_a_413_before_any_server_sees_it(routed):
    _, servers = routed
    front = AppThread(create_app([s.url for s in servers], replace(FAST, max_body=1000)))
    try:
        r = httpx.post(front.url + "/v1/contexts?model=m", content=b"\0" * 5000,
                       headers={"content-type": "application/octet-stream"})
        assert r.status_code == 413 and "over" in r.json()["error"]["message"]
        assert all(b["requests"] == 0 for b in httpx.get(front.url + "/route/backends", timeout=60).json()["backends"])
    finally:
        front.stop()
