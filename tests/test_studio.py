"""The Studio in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright, against a
server this module starts (SmolLM2, a store of its own, a fake registry). A message streams its reply; an
edited message becomes a second branch whose context shares its parent's pages; a pull moves its bar to
100%; a snapshot downloads and restores, and one of other weights is refused naming both digests;
conversations are found again after a reload, go on when their context was freed, and are renamed,
exported and deleted from the sidebar.

Each view's screenshot goes to a pytest tmp folder, so the suite leaves the checkout clean. To refresh the
README's pictures, name a folder: `LLAMAY_STUDIO_SHOTS=docs/studio pytest tests/test_studio.py`."""
import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

import llamay
from conftest import LiveServer
from store_servers import CONFIG_TYPE, MANIFEST_V2, FakeRegistry

pytestmark = pytest.mark.model
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def studio(smollm_path, tiny_pair, tmp_path_factory):
    home, ollama = tmp_path_factory.mktemp("studio-home"), tmp_path_factory.mktemp("studio-ollama")
    with pytest.MonkeyPatch.context() as mp, FakeRegistry() as reg:
        mp.setenv("LLAMAY_HOME", str(home))
        mp.setenv("OLLAMA_MODELS", str(ollama))
        mp.setenv("LLAMAY_REGISTRY", reg.url)
        gguf = tiny_pair[0].read_bytes()
        config = json.dumps({"model_format": "gguf", "model_family": "llama"}).encode()
        reg.add_manifest("library/tiny", "latest", {
            "schemaVersion": 2, "mediaType": MANIFEST_V2,
            "config": {"mediaType": CONFIG_TYPE, "digest": reg.add_blob(config), "size": len(config)},
            "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": reg.add_blob(gguf),
                        "size": len(gguf)}]})
        reg.faults.slow_s, reg.faults.chunk = 0.05, 8192  # a pull long enough to see its bar move
        server = LiveServer(["-m", str(smollm_path), "--threads", "2", "-c", "2048"])
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def page(studio, shots):
    if BROWSER is None:
        pytest.skip("no chromium (Debian: apt-get install chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="no playwright (pip install '.[test]')")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1360, "height": 860}, accept_downloads=True)
        page.errors, page.shots = [], shots
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" and  # refusals are expected
                not m.text.startswith("Failed to load resource") else None)
        page.set_default_timeout(60_000)
        yield page
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = os.environ.get("LLAMAY_STUDIO_SHOTS")
    return Path(folder) if folder else tmp_path_factory.mktemp("studio-shots")


def shoot(page, name):
    folder = page.shots
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"))


def test_a_browser_is_sent_to_the_studio_and_ollama_clients_still_get_text(studio):
    r = httpx.get(studio.url + "/", headers={"accept": "text/html,application/xhtml+xml"})
    assert r.status_code == 302 and r.headers["location"] == "/studio"
    assert httpx.get(studio.url + "/").text == "Ollama is running"
    page = httpx.get(studio.url + "/studio")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert httpx.get(studio.url + "/studio/assets/..%2Fhttp.py").status_code == 404


# Every text length the first assistant message showed, recorded in the page as it changed.
WATCH = """() => { window.lengths = []; new MutationObserver(() => {
  const m = document.querySelector('.msg.assistant .md');
  if (m && !document.querySelector('.msg.assistant [data-figures]')) window.lengths.push(m.textContent.length);
}).observe(document.body, {subtree: true, childList: true, characterData: true}); }"""


def test_a_message_streams_its_reply(studio, page):
    page.goto(studio.url + "/")
    assert page.url.endswith("/studio")
    page.fill("#system", "You are a helpful assistant.")
    page.fill("#set-max_tokens", "48")
    page.evaluate(WATCH)
    page.fill("#prompt", "Write a short story about a robot.")
    page.click("#send")
    page.wait_for_selector(".msg.assistant [data-figures]")
    partial = set(page.evaluate("window.lengths")) - {0}
    assert len(partial) >= 3  # it grew piece by piece before it ended
    figures = page.inner_text(".msg.assistant [data-figures]")
    assert "prompt tokens" in figures and "tok/s" in figures and "first token" in figures
    assert " 0 from the cache" in figures  # a first message: its context computed every prompt token
    assert page.inner_text(".msg.assistant .md").strip()
    shoot(page, "chat")


def test_an_edited_message_is_a_second_branch_sharing_its_parents_pages(studio, page):
    page.fill("#prompt", "Now name one color.")
    page.click("#send")
    page.wait_for_function("() => document.querySelectorAll('.msg.assistant [data-figures]').length == 2")
    page.locator(".msg.user").nth(1).locator("button", has_text="edit").click()
    page.fill(".msg.user textarea.edit", "Now name one fruit.")
    page.click("button:has-text('send as a branch')")
    page.wait_for_function("() => document.querySelectorAll('.msg.user .branch').length == 1 && "
                           "document.querySelectorAll('.msg.assistant [data-figures]').length == 2 && "
                           "document.querySelector('.msg.user .branch').textContent == '2/2'")
    assert page.locator(".msg.user").nth(1).inner_text().count("Now name one fruit.") == 1
    page.locator(".msg.user").nth(1).locator("button[title='previous branch']").click()
    assert "Now name one color." in page.locator(".msg.user").nth(1).inner_text()
    shoot(page, "branches")
    page.goto(studio.url + "/studio#contexts")
    page.wait_for_selector(".tree .kids [data-shared]")
    shared = int(page.get_attribute(".tree .kids [data-shared]", "data-shared"))
    assert shared > 0  # the branch's context holds its parent's pages, not copies
    contexts = httpx.get(studio.url + "/studio/api/contexts").json()["data"]
    child = next(c for c in contexts if c["parent"])
    assert child["shared_with_parent"] == shared and child["forked_at"] > 0
    for tail in ("one", "two"):  # a finished prompt stays in the prefix cache; the second reuses it
        httpx.post(studio.url + "/v1/completions", json={"prompt": "A prefix the cache keeps for later, " + tail,
                                                         "max_tokens": 2}, timeout=60)
    httpx.post(studio.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                           "max_tokens": 2}, timeout=60)
    page.wait_for_selector("#ctx-cache td:has-text('A prefix the cache keeps')")
    page.wait_for_selector("#ctx-cache .special:text-is('im_start')")  # a chat's special tokens, as marks
    assert "<|im_start|>" not in page.inner_text("#ctx-cache")
    cache = httpx.get(studio.url + "/studio/api/cache").json()["models"]
    assert any(s["hits"] >= 1 and s["text"].startswith("A prefix the cache") for seqs in cache.values() for s in seqs)
    shoot(page, "contexts")


def test_conversations_are_kept_server_side(studio, page):
    page.goto(studio.url + "/studio#chat")
    page.reload()
    page.wait_for_selector("#conversations .conv")
    page.click("#conversations .conv")
    page.wait_for_function("() => document.querySelectorAll('.msg').length == 4")
    assert "a short story about a robot" in page.inner_text("#messages")


def test_a_conversation_whose_context_was_freed_goes_on(studio, page):
    for c in httpx.get(studio.url + "/v1/contexts").json()["data"]:  # as the Studio's LRU or the TTL would
        assert httpx.delete(f"{studio.url}/v1/contexts/{c['id']}").status_code == 200
    page.fill("#set-max_tokens", "8")
    page.fill("#prompt", "And one more?")
    page.click("#send")
    page.wait_for_function("() => document.querySelectorAll('.msg.assistant [data-figures]').length == 3")
    assert page.locator(".msg .error").count() == 0
    figures = page.locator(".msg.assistant [data-figures]").nth(2).inner_text()
    assert " 0 from the cache" not in figures  # made again from the messages, out of the prefix cache



def test_a_stopped_answer_is_kept_marked_and_sent_on(studio, page):
    """As llama-server's web UI does: a reply the user stopped stays as far as it got, and the next message
    sends it with the rest; here it is also marked "stopped" in its header, after a reload too."""
    page.click("button:has-text('New chat')")
    page.fill("#set-max_tokens", "400")
    page.fill("#prompt", "Tell me everything you know about the history of Rome.")
    page.click("#send")
    page.wait_for_function("() => (document.querySelector('.msg.assistant .md') || {}).textContent?.length > 20")
    page.click("#stop")
    page.wait_for_selector(".msg.assistant.stopped .who .badge.stopped")
    assert "the rest was not generated" in page.inner_text(".msg.assistant [data-stopped]")
    assert page.locator(".msg.assistant [data-figures]").count() == 0
    page.fill("#set-max_tokens", "16")
    page.fill("#prompt", "Thanks. Now in one sentence?")
    with page.expect_request(lambda r: r.url.endswith("/studio/api/contexts") and r.method == "POST") as request:
        page.click("#send")
    sent = request.value.post_data_json["messages"]
    page.wait_for_function("() => document.querySelectorAll('.msg.assistant [data-figures]').length == 1")
    assert page.locator(".msg .error").count() == 0
    assert page.locator(".msg").count() == 4
    cid = page.get_attribute("#conversations .conv.active", "data-conversation")
    stored = httpx.get(f"{studio.url}/studio/api/conversations/{cid}").json()["nodes"].values()
    partial = next(n for n in stored if n.get("stopped"))
    assert partial["content"].strip()  # (shown as markdown: its text is not the page's text)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"] and sent[1]["content"] == partial["content"]
    page.reload()
    page.click(f"#conversations [data-conversation='{cid}']")
    page.wait_for_selector(".msg.assistant.stopped .who .badge.stopped")
    assert page.locator(".msg.assistant .badge.stopped").count() == 1  # the finished reply is not marked


def long_conversation(model: str, n_turns: int) -> dict:
    """A stored conversation as the page writes one, n_turns user/assistant pairs of several lines each."""
    nodes, parent = {}, None
    for i in range(2 * n_turns):
        nid = f"n{i}"
        role = "user" if i % 2 == 0 else "assistant"
        nodes[nid] = {"id": nid, "t": i, "parent": parent, "role": role, "content": f"{role} line {i}\n" * 6}
        parent = nid
    return {"id": "long", "title": "A long conversation", "model": model, "system": "",
            "settings": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 8, "top_k": 40, "min_p": 0.05,
                         "repeat_penalty": 1, "seed": "", "schema": ""}, "nodes": nodes, "leaf": parent, "heads": {}}


# The page's scroll state: the document's, the message pane's, and where the composer and sidebar are.
LAYOUT = """() => { const m = document.getElementById('messages'), r = (s) => document.querySelector(s)
  .getBoundingClientRect(); return { page: document.scrollingElement.scrollHeight, view: innerHeight,
  scrollY: scrollY, paneHeight: m.scrollHeight, paneShown: m.clientHeight, paneTop: m.scrollTop,
  prompt: r('#prompt').bottom, send: r('#send').bottom, sidebar: r('#conversations').top }; }"""


def test_the_message_pane_scrolls_and_the_composer_and_sidebar_stay(studio, page):
    model = httpx.get(studio.url + "/api/tags").json()["models"][0]["name"]
    r = httpx.put(f"{studio.url}/studio/api/conversations/long", json=long_conversation(model, 20))
    assert r.status_code == 200, r.text
    page.goto(studio.url + "/studio#chat")
    page.reload()
    page.click("#conversations [data-conversation='long']")
    page.wait_for_function("() => document.querySelectorAll('.msg').length == 40")
    page.mouse.wheel(0, 5000)  # over the page: only the pane under the pointer may move
    page.evaluate("() => window.scrollTo(0, 5000)")
    at = page.evaluate(LAYOUT)
    assert at["page"] <= at["view"] and at["scrollY"] == 0  # the document does not scroll
    assert at["paneHeight"] > 2 * at["paneShown"]  # the messages overflow their pane, which scrolls them
    assert at["paneTop"] + at["paneShown"] >= at["paneHeight"] - 2  # opened at the newest message
    assert at["send"] <= at["view"] and at["prompt"] <= at["view"]  # the composer is on screen
    page.evaluate("() => { document.getElementById('messages').scrollTop = 0; }")
    top = page.evaluate(LAYOUT)
    assert top["paneTop"] == 0 and (top["send"], top["sidebar"]) == (at["send"], at["sidebar"])
    assert page.locator(".msg").first.is_visible()
    shoot(page, "scroll")
    assert httpx.delete(f"{studio.url}/studio/api/conversations/long").status_code == 200


def test_the_schema_box_makes_the_answer_follow_it(studio, page):
    page.click("button:has-text('New chat')")
    page.fill("#set-max_tokens", "64")
    page.fill("#schema", json.dumps({"type": "object", "properties": {"color": {"enum": ["red", "blue"]}},
                                     "required": ["color"], "additionalProperties": False}))
    page.fill("#prompt", "Pick a color.")
    page.click("#send")
    page.wait_for_selector(".msg.assistant [data-figures]")
    answer = json.loads(page.inner_text(".msg.assistant .md"))
    assert answer["color"] in ("red", "blue") and set(answer) == {"color"}

def test_code_blocks_copy_and_the_sampling_controls_reach_the_request(studio, page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=studio.url)
    copied = page.evaluate("""async () => {
      const { markdown } = await import('/studio/assets/util.js');
      const md = markdown('Run this:\\n```python\\nprint("hi")\\n```');
      document.body.append(md);
      md.querySelector('pre button.copy').click();
      await new Promise((r) => setTimeout(r, 200));
      const text = await navigator.clipboard.readText();
      md.remove();
      return text; }""")
    assert copied == 'print("hi")'
    page.click("button:has-text('New chat')")
    assert (page.input_value("#set-top_k"), page.input_value("#set-min_p")) == ("40", "0.05")
    for key, value in (("top_k", "7"), ("min_p", "0.1"), ("repeat_penalty", "1.3"), ("max_tokens", "2")):
        page.fill(f"#set-{key}", value)
    page.fill("#prompt", "Hi")
    with page.expect_request(lambda r: r.url.endswith("/chat")) as request:
        page.click("#send")
    body = request.value.post_data_json
    assert (body["top_k"], body["min_p"], body["repeat_penalty"], body["max_tokens"]) == (7, 0.1, 1.3, 2)
    page.wait_for_selector(".msg.assistant [data-figures]")


def test_the_sidebar_renames_exports_and_deletes_a_conversation(studio, page, tmp_path):
    page.wait_for_selector("#conversations .conv")
    row = page.locator("#conversations .conv").first
    cid = row.get_attribute("data-conversation")
    page.once("dialog", lambda d: d.accept("Colors"))
    row.locator("button[title='rename']").click()
    page.wait_for_selector(f"[data-conversation='{cid}'] .title:text-is('Colors')")
    with page.expect_download() as info:
        page.click(f"[data-conversation='{cid}'] button[title='export as JSON']")
    saved = tmp_path / "conversation.json"
    info.value.save_as(saved)
    doc = json.loads(saved.read_text())
    assert doc["title"] == "Colors" and [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    page.once("dialog", lambda d: d.accept())
    page.click(f"[data-conversation='{cid}'] button[title='delete']")
    page.wait_for_selector(f"[data-conversation='{cid}']", state="detached")
    assert httpx.get(f"{studio.url}/studio/api/conversations/{cid}").status_code == 404


def test_a_pull_moves_its_bar_to_100(studio, page):
    page.goto(studio.url + "/studio#models")
    page.wait_for_selector("#models-table tr[data-model]")
    page.evaluate("""() => { window.widths = []; const bar = document.getElementById('pull-bar');
      new MutationObserver(() => window.widths.push(bar.style.width)).observe(bar, {attributes: true}); }""")
    page.fill("#pull-name", "tiny")
    page.click("#pull")
    page.wait_for_function("() => document.getElementById('pull-status').textContent == 'success'")
    widths = [float(w.rstrip("%")) for w in page.evaluate("window.widths") if w]
    assert widths[-1] == 100 and any(0 < w < 100 for w in widths)
    page.wait_for_selector("#models-table tr[data-model='tiny:latest']")
    shoot(page, "models")


def test_a_snapshot_downloads_and_restores_and_other_weights_are_refused(studio, page, tmp_path, tiny_pair,
                                                                         smollm_path):
    page.goto(studio.url + "/studio#contexts")
    page.fill("#ctx-prompt", "The three laws of robotics are")
    page.click("#ctx-create")
    page.wait_for_selector("#ctx-notice:has-text('made ctx_')")
    cid = page.inner_text("#ctx-notice").split()[1].rstrip(":")
    with page.expect_download() as info:
        page.click(f"[data-context='{cid}'] ~ a:has-text('snapshot')")
    saved = tmp_path / "snap.llamayctx"
    info.value.save_as(saved)
    assert saved.stat().st_size > 0
    page.set_input_files("#ctx-upload", str(saved))
    page.click("#ctx-restore")
    page.wait_for_selector("#ctx-notice:has-text('restored as')")
    restored = page.inner_text("#ctx-notice").split()[2].rstrip(":")
    assert restored != cid
    want = httpx.get(f"{studio.url}/v1/contexts/{cid}").json()["tokens"]
    assert httpx.get(f"{studio.url}/v1/contexts/{restored}").json()["tokens"] == want

    other = tmp_path / "other.llamayctx"
    llamay.load(tiny_pair[0], n_ctx=512).create_context("other weights").save(str(other))
    page.set_input_files("#ctx-upload", str(other))
    page.click("#ctx-restore")
    page.wait_for_selector("#ctx-notice.error")
    refusal = page.inner_text("#ctx-notice")
    from llamay.engine.digest import weights_digest
    assert "snapshot refused: snapshot was made under other weights" in refusal
    assert f"snapshot weights sha256 {weights_digest(tiny_pair[0])}" in refusal
    assert f"loaded model sha256 {weights_digest(smollm_path)}" in refusal
    shoot(page, "snapshots")



def test_the_contexts_buttons_fork_and_delete(studio, page):
    page.goto(studio.url + "/studio#contexts")
    page.fill("#ctx-prompt", "A context to fork from, long enough to fill a page of thirty-two tokens or so.")
    page.click("#ctx-create")
    page.wait_for_selector("#ctx-notice:has-text('made ctx_')")
    cid = page.inner_text("#ctx-notice").split()[1].rstrip(":")
    page.click(f"[data-context='{cid}'] ~ button:has-text('fork')")
    page.wait_for_selector(f".node:has([data-context='{cid}']) .kids [data-context]")
    kid = page.get_attribute(f".node:has([data-context='{cid}']) .kids [data-context]", "data-context")
    row = next(c for c in httpx.get(studio.url + "/studio/api/contexts").json()["data"] if c["id"] == kid)
    assert row["parent"] == cid and row["shared_with_parent"] == row["pages"] >= 1  # a fork copies nothing
    page.click(f"[data-context='{kid}'] ~ button:has-text('delete')")
    page.wait_for_selector(f"[data-context='{kid}']", state="detached")
    assert httpx.get(f"{studio.url}/v1/contexts/{kid}").status_code == 404

PLOT_UNITS = {"tps": "tok/s", "queue": "requests", "pages": "pages", "hit": "%"}


def test_the_server_view_plots_the_metrics(studio, page):
    for tail in ("first", "second"):  # the second prompt shares the first's prefix: cached tokens
        httpx.post(studio.url + "/v1/completions", json={"prompt": "A shared prefix for the cached share of recent "
                                                         "prompts, long enough to fill a page or two, " + tail,
                                                         "max_tokens": 2}, timeout=60)
    metrics = {line.split()[0]: float(line.split()[1]) for line in httpx.get(studio.url + "/metrics").text.splitlines()
               if line.startswith("llamay_recent_prompt")}
    prompt, hit = int(metrics["llamay_recent_prompt_tokens"]), int(metrics["llamay_recent_prompt_cache_hit_tokens"])
    assert 0 < hit < prompt
    page.goto(studio.url + "/studio#server")
    page.reload()  # the page opens on the Server tab: nothing sampled before
    page.wait_for_function("() => document.querySelector('#plot-pages .value').textContent.includes('pages')")
    # at page open: the recent prompts' cached share, not a rate over a window with no prompt in it
    label = page.inner_text("#plot-hit .value")
    assert label.endswith("% cached") and label != "0% cached", label
    assert page.inner_text("#plot-hit .detail").startswith(f"{hit} of {prompt} prompt tokens")
    for name, unit in PLOT_UNITS.items():  # axes with units, and the value at page open already plotted
        plot = page.locator(f"#plot-{name} svg")
        assert plot.locator(".axis-y .unit").text_content() == unit  # (SVG text: no inner_text)
        assert plot.locator(".axis-x .unit").text_content() == "time (minutes ago)"
        assert {"-3 min", "now"} <= set(plot.locator(".axis-x text").all_text_contents())
        assert plot.locator(".point").count() == 1, name
    assert page.locator("#plot-hit .axis-y text").all_text_contents()[-2] == "100"  # the top tick: 100 %
    httpx.post(studio.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 8}, timeout=60)
    page.wait_for_function("() => document.querySelector('#plot-tps .value').textContent != '0.0 tok/s'", timeout=10_000)
    totals = page.inner_text("#server-totals")
    assert "requests" in totals and "1 model loaded" in totals
    shoot(page, "server")
    assert page.errors == []


def test_with_an_api_key_the_page_loads_and_its_calls_need_the_key(tiny_pair):
    server = LiveServer(["-m", str(tiny_pair[0]), "--threads", "1", "-c", "512", "--api-key", "sekret"])
    try:
        assert httpx.get(server.url + "/studio").status_code == 200  # the page and assets hold no data
        assert httpx.get(server.url + "/studio/assets/main.js").status_code == 200
        assert httpx.get(server.url + "/studio/api/contexts").status_code == 401
        assert httpx.get(server.url + "/studio/api/conversations", headers={"authorization": "Bearer sekret"}) \
            .status_code == 200
    finally:
        server.stop()
