"""The context routes of `llamay serve` over HTTP (llamay's own API): create, fork, generate, chat, snapshot
download and restore, delete. Greedy answers must agree with the OpenAI routes for the same text, forks and
restored snapshots must continue exactly like their origin without recomputing it, and every failure comes
back in OpenAI's error shape (checked by the official openai client's own error mapping)."""
import hashlib
import re
import tempfile
import time

import httpx
import openai
import pytest
from openai.types import Completion

pytestmark = pytest.mark.model

# ~80 tokens: three KV pages (of 32 tokens, the default), so a fork that copied anything would show
PROMPT = ("The old lighthouse keeper climbed the stairs every evening to light the lamp. The sea below was "
          "grey and restless, and the gulls circled the rocks near the shore. One night in early winter he "
          "saw a small boat drifting towards the reef. Its sail was torn and nobody seemed to be at the helm. He "
          "pulled on his coat, took the lantern from its hook, and he")
GREEDY = {"max_tokens": 12, "temperature": 0}
OCTET = {"content-type": "application/octet-stream"}


@pytest.fixture(scope="module")
def http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def oai(live_server):
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def model(http):
    return http.get("/v1/models").json()["data"][0]["id"]


@pytest.fixture
def made(http, live_server):
    """Ids of the contexts a test creates; deleted afterwards, and the KV state checked."""
    ids: list[str] = []
    yield ids
    for cid in ids:
        assert http.delete(f"/v1/contexts/{cid}").status_code in (200, 404)
    live_server.check_pages()


def create(http, made, **body) -> dict:
    r = http.post("/v1/contexts", json=body)
    assert r.status_code == 201, r.text
    made.append(r.json()["id"])
    return r.json()


def fork(http, made, cid: str, n: int) -> list[str]:
    r = http.post(f"/v1/contexts/{cid}/fork", params={"n": n})
    assert r.status_code == 201, r.text
    made.extend(r.json()["ids"])
    return r.json()["ids"]


def restore(http, made, data: bytes, model: str) -> dict:
    r = http.post("/v1/contexts", params={"model": model}, content=data, headers=OCTET)
    assert r.status_code == 201, r.text
    made.append(r.json()["id"])
    return r.json()


def generate(http, cid: str, **body) -> dict:
    r = http.post(f"/v1/contexts/{cid}/generate", json={**GREEDY, **body})
    assert r.status_code == 200, r.text
    return r.json()


def text_of(out: dict) -> str:
    return Completion.model_validate(out).choices[0].text


def pages_used(http) -> int:
    return int(re.search(r"^llamay_kv_pages_used (\d+)$", http.get("/metrics").text, re.M).group(1))


def streamed_text(oai, cid: str) -> str:
    """The generate form streamed, read by the openai client's own SSE stream of completion chunks."""
    chunks = oai.post(f"/contexts/{cid}/generate", body={**GREEDY, "stream": True}, cast_to=Completion,
                      stream=True, stream_cls=openai.Stream[Completion])
    chunks = list(chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    return "".join(c.choices[0].text for c in chunks)


def test_greedy_agrees_across_context_forks_completions_and_snapshots(http, oai, made, model):
    ctx = create(http, made, model=model, prompt=PROMPT)
    assert ctx["pages"] >= 3
    snap = http.get(f"/v1/contexts/{ctx['id']}/snapshot")
    assert snap.status_code == 200 and snap.headers["content-type"] == "application/octet-stream"
    kids = fork(http, made, ctx["id"], 2)
    reference = text_of(http.post("/v1/completions", json={"model": model, "prompt": PROMPT, **GREEDY}).json())
    assert reference
    first = generate(http, ctx["id"])
    assert text_of(first) == reference
    # nothing was computed for the context's own tokens: its last logits were kept
    assert first["usage"]["prompt_tokens"] == ctx["tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == ctx["tokens"]
    assert text_of(generate(http, kids[0])) == reference
    assert streamed_text(oai, kids[1]) == reference
    back = restore(http, made, snap.content, model)
    assert (back["tokens"], back["pages"], back["cached_tokens"]) == (ctx["tokens"], ctx["pages"], ctx["tokens"])
    again = generate(http, back["id"])
    assert text_of(again) == reference
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == again["usage"]["prompt_tokens"] == ctx["tokens"]


def test_a_context_continues_like_one_long_completion_also_after_restore(http, made, model):
    longer = http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 20, "temperature": 0})
    whole = text_of(longer.json())
    ctx = create(http, made, model=model, prompt=PROMPT)
    head = text_of(generate(http, ctx["id"], max_tokens=8))
    snap = http.get(f"/v1/contexts/{ctx['id']}/snapshot").content  # holds a sampled, uncomputed token
    tail = text_of(generate(http, ctx["id"], max_tokens=12))
    assert head + tail == whole
    back = restore(http, made, snap, model)
    assert back["tokens"] == ctx["tokens"] + 8
    resumed = generate(http, back["id"], max_tokens=12)
    assert text_of(resumed) == tail
    assert resumed["usage"]["prompt_tokens_details"]["cached_tokens"] == back["tokens"]


def test_fork_allocates_no_pages_and_forks_sample_independently(http, made, model):
    ctx = create(http, made, model=model, prompt=PROMPT + " waved")
    before = pages_used(http)
    kids = fork(http, made, ctx["id"], 4)
    assert len(set(kids)) == 4 and ctx["id"] not in kids
    assert pages_used(http) == before
    for cid in [ctx["id"], *kids]:
        shown = http.get(f"/v1/contexts/{cid}").json()
        assert (shown["tokens"], shown["pages"]) == (ctx["tokens"], ctx["pages"])
    listed = {c["id"] for c in http.get("/v1/contexts").json()["data"]}
    assert {ctx["id"], *kids} <= listed
    texts = [text_of(generate(http, cid, temperature=1.0, seed=seed, max_tokens=10))
             for cid, seed in zip(kids, (1, 2, 3, 1))]
    assert texts[0] == texts[3]  # same seed, same state: same sample
    assert len(set(texts[:3])) >= 2, texts
    # the kids' writes went to their own pages: the parent still answers like a fresh completion
    reference = http.post("/v1/completions", json={"model": model, "prompt": PROMPT + " waved", **GREEDY}).json()
    assert text_of(generate(http, ctx["id"])) == text_of(reference)


def test_chat_form_computes_only_the_new_turn_and_answers_like_chat_completions(http, oai, made, model):
    conversation = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Name one colour of the rainbow."}]
    ctx = create(http, made, model=model, messages=conversation)
    first = oai.post(f"/contexts/{ctx['id']}/chat", body=GREEDY,
                     cast_to=openai.types.chat.ChatCompletion)
    expected = oai.chat.completions.create(model=model, messages=conversation, **GREEDY)
    reply = first.choices[0].message.content
    assert reply == expected.choices[0].message.content and reply
    assert first.usage.prompt_tokens_details.cached_tokens == ctx["tokens"] - 1  # its last token, for logits
    held = http.get(f"/v1/contexts/{ctx['id']}").json()["tokens"]
    question = {"role": "user", "content": "And another one?"}
    second = oai.post(f"/contexts/{ctx['id']}/chat", body={**GREEDY, "messages": [question]},
                      cast_to=openai.types.chat.ChatCompletion)
    whole = conversation + [{"role": "assistant", "content": reply}, question]
    expected = oai.chat.completions.create(model=model, messages=whole, **GREEDY)
    assert second.choices[0].message.content == expected.choices[0].message.content
    assert second.usage.prompt_tokens == expected.usage.prompt_tokens
    # computed: the new turn, plus the reply's last sampled token (never computed while it was generated)
    assert second.usage.prompt_tokens_details.cached_tokens == held - (first.choices[0].finish_reason == "length")



def test_a_fork_at_a_message_branches_there_sharing_the_pages_before_it(http, oai, made, model):
    conversation = [{"role": "system", "content": "You tell stories like this one. " + PROMPT},  # past two pages
                    {"role": "user", "content": "Name one colour of the rainbow."}]
    ctx = create(http, made, model=model, messages=conversation)
    oai.post(f"/contexts/{ctx['id']}/chat", body=GREEDY, cast_to=openai.types.chat.ChatCompletion)
    r = http.post(f"/v1/contexts/{ctx['id']}/fork", params={"n": 1, "messages": 1})  # keeps the system prompt
    assert r.status_code == 201, r.text
    branch = r.json()["ids"][0]
    made.append(branch)
    edited = {"role": "user", "content": "Name one fruit."}
    got = oai.post(f"/contexts/{branch}/chat", body={**GREEDY, "messages": [edited]},
                   cast_to=openai.types.chat.ChatCompletion)
    want = oai.chat.completions.create(model=model, messages=[conversation[0], edited], **GREEDY)
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.usage.prompt_tokens_details.cached_tokens > 0  # the system prompt's tokens, not recomputed
    rows = {c["id"]: c for c in http.get("/studio/api/contexts").json()["data"]}
    assert rows[branch]["parent"] == ctx["id"] and rows[branch]["shared_with_parent"] >= 1
    assert 0 < rows[branch]["forked_at"] < rows[ctx["id"]]["tokens"]
    for bad in ("0", "4", "x"):
        r = http.post(f"/v1/contexts/{ctx['id']}/fork", params={"n": 1, "messages": bad})
        assert r.status_code == 400 and "messages must be an integer from 1 to 3" in r.json()["error"]["message"]

def refused(call, status_error: type, param: str | None = None) -> openai.APIStatusError:
    """The openai client maps the status to status_error and reads OpenAI's {"error": {...}} shape."""
    with pytest.raises(status_error) as info:
        call()
    err = info.value
    assert isinstance(err.body, dict) and err.body["message"] and err.type, err.body
    if param is not None:
        assert err.param == param, err.body
    return err


def test_errors_come_in_openais_shape(oai, http, made, model):
    ctx = create(http, made, model=model, prompt="Once upon a time")
    post = oai.post
    for call in (lambda: oai.get("/contexts/ctx_nope", cast_to=object),
                 lambda: oai.delete("/contexts/ctx_nope", cast_to=object),
                 lambda: post("/contexts/ctx_nope/generate", body=GREEDY, cast_to=object),
                 lambda: post("/contexts/ctx_nope/fork", body={}, cast_to=object),
                 lambda: oai.get("/contexts/ctx_nope/snapshot", cast_to=object)):
        assert "ctx_nope" in refused(call, openai.NotFoundError).body["message"]
    for n in (0, 1000, "two"):
        refused(lambda: post(f"/contexts/{ctx['id']}/fork?n={n}", body={}, cast_to=object), openai.BadRequestError,
                "n")
    both = {"model": model, "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}]}
    refused(lambda: post("/contexts", body=both, cast_to=object), openai.BadRequestError, "prompt")
    refused(lambda: post("/contexts", body={"model": model}, cast_to=object), openai.BadRequestError, "prompt")
    refused(lambda: post("/contexts", body={"model": "no-such-model", "prompt": "Hi"}, cast_to=object),
            openai.NotFoundError)
    refused(lambda: post(f"/contexts/{ctx['id']}/chat", body={"messages": [{"role": "user", "content": "Hi"}]},
                         cast_to=object), openai.BadRequestError, "messages")  # not made from messages


def test_over_the_context_length_is_refused_not_truncated(oai, http, made, model):
    n_ctx = 2048  # the live_server fixture's -c
    long = {"model": model, "prompt": "word " * (n_ctx + 10)}
    err = refused(lambda: oai.post("/contexts", body=long, cast_to=object), openai.BadRequestError)
    assert str(n_ctx) in err.body["message"] and err.code == "context_length_exceeded"
    ctx = create(http, made, model=model, prompt="Once upon a time")
    ids = [int(t) for t in http.post("/tokenize", json={"content": long["prompt"]}).json()["tokens"]][:n_ctx]
    err = refused(lambda: oai.post(f"/contexts/{ctx['id']}/generate", body={"prompt": ids, **GREEDY},
                                   cast_to=object), openai.BadRequestError)
    assert str(n_ctx) in err.body["message"] and err.code == "context_length_exceeded"
    assert http.get(f"/v1/contexts/{ctx['id']}").json()["tokens"] == ctx["tokens"]  # left as it was
    assert text_of(generate(http, ctx["id"], max_tokens=2))  # and still usable


def test_a_busy_context_answers_409_until_its_generation_ends(oai, http, made, model):
    ctx = create(http, made, model=model, prompt=PROMPT)
    cid = ctx["id"]
    with http.stream("POST", f"/v1/contexts/{cid}/generate", json={"max_tokens": 200, "temperature": 0,
                                                                    "stream": True}) as stream:
        lines = stream.iter_lines()  # kept referenced: a dropped iterator closes the connection
        assert next(lines).startswith("data: ")
        for call in (lambda: oai.post(f"/contexts/{cid}/generate", body=GREEDY, cast_to=object),
                     lambda: oai.post(f"/contexts/{cid}/fork?n=2", body={}, cast_to=object),
                     lambda: oai.get(f"/contexts/{cid}/snapshot", cast_to=object),
                     lambda: oai.delete(f"/contexts/{cid}", cast_to=object)):
            refused(call, openai.ConflictError, "id")
    # the client went away mid-stream: the generation is cancelled and the context is free again
    for _ in range(200):
        r = http.post(f"/v1/contexts/{cid}/generate", json={**GREEDY, "max_tokens": 2})
        if r.status_code != 409:
            break
        time.sleep(0.05)
    assert r.status_code == 200, r.text


def test_an_unknown_context_is_not_reported_as_an_unknown_model(oai):
    err = refused(lambda: oai.get("/contexts/ctx_nope", cast_to=object), openai.NotFoundError, "id")
    assert err.code != "model_not_found"


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def gemma_snapshot(gemma_path) -> bytes:
    """A real snapshot made by a server running another model."""
    from conftest import LiveServer
    server = LiveServer(["-m", str(gemma_path), "--threads", "2", "-c", "256", "--concurrency", "1"])
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            name = client.get("/v1/models").json()["data"][0]["id"]
            cid = client.post("/v1/contexts", json={"model": name, "prompt": "Hello"}).json()["id"]
            return client.get(f"/v1/contexts/{cid}/snapshot").content
    finally:
        server.stop()


def test_bad_snapshot_uploads_are_refused_clearly(oai, http, made, model, smollm_path, gemma_path, gemma_snapshot):
    ctx = create(http, made, model=model, prompt="Once upon a time")
    good = http.get(f"/v1/contexts/{ctx['id']}/snapshot").content
    before = {c["id"] for c in http.get("/v1/contexts").json()["data"]}

    def upload(data: bytes, query: str = f"?model={model}") -> openai.APIStatusError:
        return refused(lambda: oai.post(f"/contexts{query}", content=data, cast_to=object,
                                        options={"headers": OCTET}), openai.BadRequestError)

    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40  # in the page data: only the checksum can tell
    message = upload(bytes(flipped)).body["message"]
    assert "corrupted" in message and tempfile.gettempdir() not in message  # no server path
    assert "truncated" in upload(good[:-1000]).body["message"]
    assert "not a .llamayctx" in upload(b"GGUF" + bytes(300)).body["message"]
    assert "empty" in upload(b"").body["message"]
    message = upload(gemma_snapshot).body["message"]
    assert sha256_of(gemma_path) in message and sha256_of(smollm_path) in message
    refused(lambda: oai.post("/contexts?model=no-such-model", content=good, cast_to=object,
                             options={"headers": OCTET}), openai.NotFoundError)
    assert {c["id"] for c in http.get("/v1/contexts").json()["data"]} == before  # nothing half-made


def test_delete_frees_the_context_and_keeps_its_tokens_cached(http, live_server, model):
    prompt = PROMPT + " shouted"
    ctx = http.post("/v1/contexts", json={"model": model, "prompt": prompt}).json()
    kids = http.post(f"/v1/contexts/{ctx['id']}/fork", params={"n": 3}).json()["ids"]
    for cid in kids:
        generate(http, cid, max_tokens=4)  # the kids write (copy-on-write) into pages of their own
    for cid in [ctx["id"], *kids]:
        r = http.delete(f"/v1/contexts/{cid}")
        assert r.status_code == 200 and r.json()["deleted"] is True
        assert http.get(f"/v1/contexts/{cid}").status_code == 404
        assert http.delete(f"/v1/contexts/{cid}").status_code == 404
    live_server.check_pages()
    assert http.get("/v1/contexts").json()["data"] == []  # every other test deleted its own
    # the freed pages went to the prefix cache, and the kids' generations kept the logits at the prompt's end:
    # the same prompt is not evaluated again, not even its last token
    usage = http.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 1}).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] == ctx["tokens"]
