"""The Studio's JSON routes without a browser, called as its page calls them (a new chat, a turn, a branch):
any number of conversations leaves the server answering, and conversations can be renamed, exported and
deleted."""
import httpx
import pytest
from conftest import LiveServer

pytestmark = pytest.mark.model
TURN = {"max_tokens": 1, "temperature": 0}


@pytest.fixture(scope="module")
def studio(smollm_path, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMAY_HOME", str(tmp_path_factory.mktemp("studio-api-home")))
        server = LiveServer(["-m", str(smollm_path), "--threads", "2", "-c", "2048"])  # --max-contexts: default
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def http(studio):
    with httpx.Client(base_url=studio.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def model(http):
    return http.get("/v1/models").json()["data"][0]["id"]


def ok(r: httpx.Response) -> dict:
    assert r.status_code in (200, 201), r.text
    return r.json()


def new_chat(http, model, cid: str, text: str) -> dict:
    """What the page does for "New chat" and one message: a context of the conversation, its answer, the save."""
    user = {"role": "user", "content": text}
    ctx = ok(http.post("/studio/api/contexts", json={"model": model, "messages": [user]}))["id"]
    answer = ok(http.post(f"/studio/api/contexts/{ctx}/chat", json=TURN))["choices"][0]["message"]
    doc = {"id": cid, "title": text, "model": model, "system": "", "settings": {}, "leaf": "a", "heads": {ctx: "a"},
           "nodes": {"u": {"id": "u", "parent": None, "role": "user", "content": text, "t": 1},
                     "a": {"id": "a", "parent": "u", "role": "assistant", "content": answer["content"], "t": 2,
                           "ctx": ctx}}}
    ok(http.put(f"/studio/api/conversations/{cid}", json=doc))
    return doc


def test_any_number_of_conversations_leaves_the_server_answering(studio, http, model):
    for i in range(500):
        new_chat(http, model, f"many-{i}", "Hi")
    new_chat(http, model, "one-more", "Hello there")
    r = http.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "Hi"}],
                                                **TURN})
    assert r.status_code == 200, r.text
    studio_held = [c for c in ok(http.get("/studio/api/contexts"))["data"] if c["owner"] == "studio"]
    assert 2 <= len(studio_held) <= 16  # a quarter of --max-contexts (64)
    other = ok(http.post("/v1/contexts", json={"model": model, "prompt": "Another client's context"}))["id"]
    assert http.delete(f"/v1/contexts/{other}").status_code == 200
    studio.check_pages()  # the engine's contexts are the table's: nothing freed twice or left behind


def test_the_studio_frees_its_least_recently_used_idle_contexts_first():
    from llamay.server.contexts import ContextTable, NamedContext
    table = ContextTable(max_contexts=6)
    for i, owner in enumerate(["studio", None, "studio", "studio", None, "studio"]):
        table.by_id[f"c{i}"] = NamedContext(f"c{i}", "m", i, owner=owner, last_used=float(10 - i))
    table.by_id["c5"].busy = True
    ids = lambda ncs: [nc.id for nc in ncs]
    assert ids(table.reclaimable("studio", 4, 1)) == ["c3"]  # the table is full: the oldest idle one
    assert ids(table.reclaimable("studio", 2, 1)) == ["c3", "c2", "c0"]  # 4 held + 1 new, 2 at most: c5 is busy
    assert ids(table.reclaimable("studio", 2, 1, keep=("c3",))) == ["c2", "c0"]
    assert ids(table.reclaimable("studio", 16, 0)) == []


def test_a_branch_forks_and_a_freed_conversation_is_made_again_from_the_prefix_cache(http, model):
    doc = new_chat(http, model, "branchy", "Name one colour of the rainbow, please.")
    ctx = doc["nodes"]["a"]["ctx"]
    branch = ok(http.post(f"/studio/api/contexts/{ctx}/fork", params={"n": 1, "messages": 1}))["ids"][0]
    ok(http.post(f"/studio/api/contexts/{branch}/chat", json=TURN))  # a regenerate
    rows = {c["id"]: c for c in ok(http.get("/studio/api/contexts"))["data"]}
    assert rows[branch]["parent"] == ctx and rows[branch]["owner"] == "studio"
    for i in range(20):  # newer conversations: these two are now the least recently used
        new_chat(http, model, f"newer-{i}", "Hi")
    assert http.get(f"/v1/contexts/{ctx}").status_code == 404
    r = http.post(f"/studio/api/contexts/{ctx}/chat", json=TURN)
    assert r.status_code == 404 and "no context" in r.json()["error"]["message"]  # the page makes it again:
    user = {"role": "user", "content": "Name one colour of the rainbow, please."}
    again = ok(http.post("/studio/api/contexts", json={"model": model, "messages": [user]}))
    assert again["cached_tokens"] == again["tokens"]  # from the prefix cache, with the logits at its end


def test_a_conversation_is_renamed_exported_and_deleted_with_its_contexts(http, model):
    doc = new_chat(http, model, "keeper", "What is the capital of France?")
    ctx = doc["nodes"]["a"]["ctx"]
    r = http.patch("/studio/api/conversations/keeper", json={"title": "  Geography  "})
    assert ok(r) == {"id": "keeper", "title": "Geography"}
    listed = {c["id"]: c for c in ok(http.get("/studio/api/conversations"))["data"]}
    assert listed["keeper"]["title"] == "Geography" and listed["keeper"]["model"] == model
    assert ok(http.get("/studio/api/conversations/keeper"))["title"] == "Geography"
    r = http.get("/studio/api/conversations/keeper/export")
    assert 'filename="conversation-keeper.json"' in r.headers["content-disposition"]
    exported = ok(r)
    assert exported["nodes"] == doc["nodes"] and exported["title"] == "Geography"
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant"]
    assert exported["messages"][0]["content"] == "What is the capital of France?"
    for bad in ({}, {"title": ""}, {"title": 3}):
        assert http.patch("/studio/api/conversations/keeper", json=bad).status_code == 400
    assert http.get(f"/v1/contexts/{ctx}").status_code == 200
    assert ok(http.delete("/studio/api/conversations/keeper")) == {"id": "keeper", "deleted": True}
    assert http.get(f"/v1/contexts/{ctx}").status_code == 404  # its context freed with it
    assert "keeper" not in {c["id"] for c in ok(http.get("/studio/api/conversations"))["data"]}
    for call in (http.get, http.delete, lambda u: http.patch(u, json={"title": "x"}),
                 lambda u: http.get(u + "/export")):
        r = call("/studio/api/conversations/keeper")
        assert r.status_code == 404 and "no conversation 'keeper'" in r.json()["error"]["message"]


def test_a_fork_of_too_many_frees_nothing(http, model):
    """A branch of n outside 1..64 is fork's 400, and no idle Studio context is freed for it first."""
    idle = new_chat(http, model, "before-bad-fork", "Hi")["nodes"]["a"]["ctx"]
    parent = new_chat(http, model, "bad-fork", "Hello")["nodes"]["a"]["ctx"]
    held = {c["id"] for c in ok(http.get("/studio/api/contexts"))["data"] if c["owner"] == "studio"}
    assert {idle, parent} <= held
    r = http.post(f"/studio/api/contexts/{parent}/fork", params={"n": 100000})
    assert r.status_code == 400, r.text
    assert {c["id"] for c in ok(http.get("/studio/api/contexts"))["data"] if c["owner"] == "studio"} == held


def test_metrics_carry_the_cached_share_of_recent_prompts():
    """The Studio's cached share at page open: sums over the last RECENT generations, older ones dropped."""
    from llamay.events import Usage
    from llamay.server.metrics import RECENT, Metrics

    class NoModels:
        loaded: dict = {}  # noqa: RUF012 (the registry's shape, read only)

    m = Metrics()
    for i in range(RECENT + 5):
        m.count(Usage(prompt_tokens=100, cached_tokens=0 if i < 5 else 90, completion_tokens=1))
    text = m.render(NoModels())
    assert f"llamay_recent_prompt_tokens {100 * RECENT}\n" in text
    assert f"llamay_recent_prompt_cache_hit_tokens {90 * RECENT}\n" in text  # the 5 uncached ones have left
    assert f"llamay_prompt_cache_hit_tokens_total {90 * RECENT}\n" in text
    assert "# TYPE llamay_recent_prompt_tokens gauge" in text
