"""llama-server compatibility of `llamay serve`, over plain HTTP (httpx) as llama.cpp's own server tests
(tools/server/tests/unit: test_completion, test_infill, test_slot_save, test_template, test_basic,
test_embedding) drive it: native /completion and /infill, /apply-template, /props, /slots and slot files,
the OpenAI chat additions, native embeddings, llama-server's flags. Expected values come from the engine
through another route (/v1/completions, /v1/chat/completions, /v1/embeddings, /tokenize), compared with
==, or from llama.cpp's sources (the FIM layout, the error bodies, the slot messages)."""
import json
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import pytest
from conftest import LiveServer

import llamay
from llamay.chat.template import CHATML_SOURCE
from llamay.cli import serve_llamacpp
from llamay.cli.common import CLIError
from llamay.chat import ChatTemplate
from llamay.cli.main import build_parser
from llamay.gguf import GGUFReader, GGUFWriter
from llamay.server.routes_gate import Routes

pytestmark = pytest.mark.model
HTTP = httpx.Client(timeout=120)
PROMPT = "The capital of France is"
UNUSED = 49151  # SmolLM2's last token, marked unused in the served file (fim_model)
HI = [{"role": "user", "content": "Hi"}]
# SmolLM2 has no FIM tokens: a copy names four of its special tokens with llama.cpp's metadata keys (its
# <reponame>, id 4, is FIM_REP by llama.cpp's texts)
FIM = {"pre": 7, "suf": 8, "mid": 9, "sep": 5}
FIM_REP = 4
PET = {"type": "object", "properties": {"pet": {"enum": ["cat", "dog"]}}, "required": ["pet"],
       "additionalProperties": False}


def post(url: str, path: str, **body):
    r = HTTP.post(url + path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def complete(url: str, **body) -> dict:
    return post(url, "/completion", **body)


def tokens(url: str, text: str, special: bool = True) -> list[int]:
    return post(url, "/tokenize", content=text, parse_special=special)["tokens"]


def llama_error(r: httpx.Response, status: int, kind: str) -> dict:
    """llama-server's error body: {"error": {"code": status, "message", "type"}}."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == status and body["error"]["type"] == kind
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def events(r: httpx.Response) -> list[dict]:
    """A native stream: `data: {...}` events only, no [DONE]."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    blocks = r.text.removesuffix("\n\n").split("\n\n")
    assert all(b.startswith("data: {") and "\n" not in b for b in blocks)
    return [json.loads(b[len("data: "):]) for b in blocks]


@pytest.fixture(scope="module")
def fim_model(tmp_path_factory, smollm_path) -> Path:
    """SmolLM2's file through gguf-py's reader and our writer, FIM's metadata keys added (uint32), its last
    token marked unused (a token with no text, as a padded vocabulary's are)."""
    import gguf
    r = gguf.GGUFReader(smollm_path)
    w = GGUFWriter()
    for f in r.fields.values():
        if not f.name.startswith("GGUF.") and f.name != "general.alignment":
            elem = int(f.types[1]) if len(f.types) > 1 else None
            value = f.contents()
            if f.name == "tokenizer.ggml.token_type":
                value[UNUSED] = int(gguf.TokenType.UNUSED)
            w.add(f.name, value, vtype=int(f.types[0]), elem_type=elem)
    for role, tok in FIM.items():
        w.add(f"tokenizer.ggml.fim_{role}_token_id", tok, vtype=4)
    for t in r.tensors:
        raw = np.frombuffer(t.data.tobytes(), np.uint8)
        w.add_tensor(t.name, raw, t.tensor_type.name, tuple(int(x) for x in t.shape))
    path = tmp_path_factory.mktemp("fim") / "smollm2-fim.gguf"
    w.write(path)
    return path


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def flagged(fim_model, slot_dir):
    """llama-server's flags: sampling defaults, a built-in template, per-token pooling, slot files, -v."""
    srv = LiveServer(["-m", str(fim_model), "--threads", "2", "-c", "2048", "--concurrency", "2", "--jinja",
                      "--slot-save-path", str(slot_dir), "--temp", "0", "-n", "8", "--seed", "5",
                      "--chat-template", "chatml", "--pooling", "none", "-v"])
    yield srv.url
    srv.stop()


@pytest.fixture(scope="module")
def fresh(fim_model, slot_dir):
    """The same model with nothing cached yet: where a restored slot is the only source of cache hits."""
    srv = LiveServer(["-m", str(fim_model), "--threads", "2", "-c", "2048", "--slot-save-path", str(slot_dir)])
    yield srv.url
    srv.stop()


# ---- /completion ------------------------------------------------------------------------------------

def test_completion_equals_v1_completions_with_llama_servers_fields(url, model):
    body = complete(url, prompt=PROMPT, n_predict=8, temperature=0, return_tokens=True)
    v1 = post(url, "/v1/completions", model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    assert body["content"] == v1["choices"][0]["text"] and v1["object"] == "text_completion"
    plural = post(url, "/completions", prompt=PROMPT, n_predict=8, temperature=0)  # native too
    assert plural["content"] == body["content"] and plural["tokens"] == [] and "object" not in plural
    timings = body["timings"]
    assert body["tokens_evaluated"] == len(tokens(url, PROMPT)) == timings["prompt_n"] + timings["cache_n"]
    assert timings["predicted_n"] == body["tokens_predicted"] == len(body["tokens"]) == 8
    assert (body["stop"], body["stop_type"], body["stopping_word"], body["truncated"]) == (True, "limit", "", False)
    assert post(url, "/detokenize", tokens=body["tokens"])["content"] == body["content"]
    assert (body["prompt"], body["model"], body["has_new_line"]) == (PROMPT, model, "\n" in body["content"])
    settings = body["generation_settings"]
    assert (settings["n_predict"], settings["temperature"], settings["n_ctx"]) == (8, 0.0, 2048)
    assert body["tokens_cached"] == body["tokens_evaluated"] + 8


def test_the_tokens_include_the_last_ones_that_show_no_text(fresh):
    """A reply that ends in tokens with no text (an unused token, forced by logit_bias) still lists them:
    they were held for the next text and dropped at the end."""
    bias = [[UNUSED, 100]]
    body = complete(fresh, prompt=PROMPT, n_predict=3, temperature=0, return_tokens=True, logit_bias=bias)
    assert body["tokens"] == [UNUSED] * 3 and body["tokens_predicted"] == 3 and body["content"] == ""
    got = events(HTTP.post(fresh + "/completion", json={"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                                      "stream": True, "logit_bias": bias}))
    assert [t for p in got for t in p.get("tokens", [])] == [UNUSED] * 3


def test_stream_is_llama_servers_and_matches_the_whole(url):
    whole = complete(url, prompt=PROMPT, n_predict=6, temperature=0, return_tokens=True)
    got = events(HTTP.post(url + "/completion", json={"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                                      "stream": True}))
    *parts, last = got
    assert all(p["stop"] is False and p["tokens"] and all(type(t) is int for t in p["tokens"]) for p in parts)
    assert "".join(p["content"] for p in parts) == whole["content"]
    assert [t for p in parts for t in p["tokens"]] == whole["tokens"]
    assert last["stop"] is True and last["content"] == "" and last["stop_type"] == "limit"
    assert last["timings"]["predicted_n"] == 6 and last["generation_settings"]["n_predict"] == 6


def test_prompt_shapes_and_batches(url):
    """As llama.cpp's test_completion_with_tokens_input: ids, a batch of ids and text, a mixed prompt."""
    ids = tokens(url, PROMPT)
    want = complete(url, prompt=PROMPT, n_predict=4, temperature=0)["content"]
    assert complete(url, prompt=ids, n_predict=4, temperature=0)["content"] == want
    batch = complete(url, prompt=[ids, PROMPT, {"prompt_string": PROMPT}], n_predict=4, temperature=0)
    assert [(b["index"], b["content"]) for b in batch] == [(0, want), (1, want), (2, want)]
    too_long = HTTP.post(url + "/completion", json={"prompt": [PROMPT, "hello " * 2100], "n_predict": 4})
    llama_error(too_long, 400, "exceed_context_size_error")  # the batch is refused whole, its first one stopped
    assert not any(s["is_processing"] for s in HTTP.get(url + "/slots?fail_on_no_slot=1").json())
    head, tail = tokens(url, "The capital"), " of France is"
    mixed = complete(url, prompt=head + [tail], n_predict=4, temperature=0)["content"]
    assert mixed == complete(url, prompt=head + tokens(url, tail), n_predict=4, temperature=0)["content"]


def test_n_probs_are_the_openai_logprobs(url, model):
    body = complete(url, prompt=PROMPT, n_predict=4, temperature=0, n_probs=3, return_tokens=True)
    probs = body["completion_probabilities"]
    assert [p["id"] for p in probs] == body["tokens"]
    assert all(len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["id"] == p["id"] and p["logprob"] <= 0
               and p["bytes"] == list(p["token"].encode()) for p in probs)
    v1 = post(url, "/v1/completions", model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=3)
    assert v1["choices"][0]["logprobs"]["token_logprobs"] == [p["logprob"] for p in probs]


def test_eos_ignore_eos_and_stop_words(url):
    prompt = post(url, "/apply-template", messages=HI)["prompt"]
    ended = complete(url, prompt=prompt, n_predict=64, temperature=0)
    assert ended["stop_type"] == "eos" and ended["tokens_predicted"] < 64
    n = ended["tokens_predicted"] + 3
    going = complete(url, prompt=prompt, n_predict=n, temperature=0, ignore_eos=True)
    assert going["stop_type"] == "limit" and going["tokens_predicted"] == n
    assert going["content"].startswith(ended["content"]) and going["content"] != ended["content"]
    word = ended["content"].split()[1]
    cut = complete(url, prompt=prompt, n_predict=64, temperature=0, stop=[word])
    assert (cut["stop_type"], cut["stopping_word"]) == ("word", word)
    assert cut["content"] == ended["content"][:ended["content"].index(word)]


def test_logit_bias_forms_ban_alike(url):
    first = complete(url, prompt=PROMPT, n_predict=1, temperature=0, return_tokens=True)["tokens"][0]
    text = post(url, "/detokenize", tokens=[first])["content"]
    outs = [complete(url, prompt=PROMPT, n_predict=3, temperature=0, return_tokens=True, logit_bias=bias)
            for bias in ([[first, False]], [[text, False]], {str(first): False}, {text: -1e9})]
    assert outs[0]["tokens"][0] != first and all(o["content"] == outs[0]["content"] for o in outs)


def test_knobs_we_do_not_run_accepted_off_refused_on(url, model):
    plain = complete(url, prompt=PROMPT, n_predict=4, temperature=0)["content"]
    off = complete(url, prompt=PROMPT, n_predict=4, temperature=0, mirostat=0, typical_p=1.0, dry_multiplier=0,
                   xtc_probability=0, cache_prompt=False, n_keep=0,
                   samplers=["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                             "temperature"])
    assert off["content"] == plain
    error = llama_error(HTTP.post(url + "/completion", json={"prompt": PROMPT, "mirostat": 2}), 400,
                        "invalid_request_error")
    assert "mirostat" in error["message"]
    llama_error(HTTP.post(url + "/completion", json={"prompt": PROMPT, "samplers": ["temperature", "top_k"]}), 400,
                "invalid_request_error")
    r = HTTP.post(url + "/v1/chat/completions", json={"model": model, "messages": HI, "mirostat": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "mirostat"


def test_structured_output_fields_constrain(url, model):
    """response_format json_object with a schema, the top-level json_schema and OpenAI's nested form are
    one grammar: the same greedy output, in the schema's language."""
    def chat(**fmt):
        return post(url, "/v1/chat/completions", model=model, messages=[{"role": "user", "content": "A pet?"}],
                    temperature=0, max_tokens=24, **fmt)["choices"][0]
    outs = [chat(response_format={"type": "json_object", "schema": PET}), chat(json_schema=PET),
            chat(response_format={"type": "json_schema", "json_schema": {"name": "pet", "schema": PET}})]
    assert outs[0]["finish_reason"] == "stop" and all(o["message"] == outs[0]["message"] for o in outs)
    jsonschema.validate(json.loads(outs[0]["message"]["content"]), PET)
    native = complete(url, prompt="A JSON object naming a pet:", n_predict=24, temperature=0, json_schema=PET)
    assert native["stop_type"] == "eos"
    jsonschema.validate(json.loads(native["content"]), PET)
    for path, body in (("/completion", {"prompt": PROMPT}), ("/v1/chat/completions", {"model": model, "messages": HI})):
        r = HTTP.post(url + path, json={**body, "json_schema": PET, "grammar": 'root ::= "x"'})
        assert r.status_code == 400 and "grammar" in r.text


def test_exceed_context_size(url):
    prompt = "hello " * 2100
    n = len(tokens(url, prompt))
    for stream in (False, True):
        error = llama_error(HTTP.post(url + "/completion", json={"prompt": prompt, "stream": stream}), 400,
                            "exceed_context_size_error")
        assert (error["n_prompt_tokens"], error["n_ctx"]) == (n, 2048) and n > 2048


def test_native_errors(url):
    llama_error(HTTP.post(url + "/completion", json={"n_predict": 2}), 400, "invalid_request_error")
    llama_error(HTTP.post(url + "/completion", json={"prompt": "a", "n_predict": -2}), 400, "invalid_request_error")
    llama_error(HTTP.post(url + "/completion", json={"prompt": "a", "id_slot": 9}), 400, "invalid_request_error")
    llama_error(HTTP.get(url + "/completion"), 405, "invalid_request_error")  # the app's own refusals too
    error = llama_error(HTTP.post(url + "/infill", json={"input_prefix": "a", "input_suffix": "b"}), 501,
                        "not_supported_error")
    assert error["message"] == ("Infill is not supported by this model: prefix token is missing. suffix token is "
                                "missing. middle token is missing. ")


# ---- /apply-template, /props, /slots ----------------------------------------------------------------------

def test_apply_template_is_what_chat_generates_from(url, model):
    text = post(url, "/apply-template", messages=HI)["prompt"]
    chat = post(url, "/v1/chat/completions", model=model, messages=HI, max_tokens=8, temperature=0)
    assert complete(url, prompt=text, n_predict=8, temperature=0)["content"] == chat["choices"][0]["message"]["content"]
    bare = post(url, "/apply-template", messages=HI, add_generation_prompt=False)["prompt"]
    assert bare + "<|im_start|>assistant\n" == text  # SmolLM2's template opens the assistant's turn so
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):  # llama-server's count
        assert post(url, path, messages=HI) == {"input_tokens": len(tokens(url, text))}


def test_props_and_slots(url, smollm_path):
    props = HTTP.get(url + "/props").json()
    assert (props["total_slots"], props["model_path"], props["build_info"]) == (4, str(smollm_path),
                                                                                 f"llamay-{llamay.__version__}")
    assert props["chat_template"] == GGUFReader(smollm_path).metadata["tokenizer.chat_template"]
    defaults = props["default_generation_settings"]
    assert defaults["n_ctx"] == 2048 and defaults["params"]["seed"] == 4294967295
    assert (defaults["params"]["temperature"], defaults["params"]["top_k"]) == (0.8, 40)  # llama.cpp's defaults
    assert props["modalities"]["vision"] is False
    pinned = complete(url, prompt="Slot two:", n_predict=2, temperature=0, id_slot=2)
    slots = HTTP.get(url + "/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and {s["n_ctx"] for s in slots} == {2048}
    assert pinned["id_slot"] == 2 and slots[2]["n_prompt_tokens"] == pinned["tokens_evaluated"]
    assert slots[2]["params"]["n_predict"] == 2 and slots[2]["is_processing"] is False
    error = llama_error(HTTP.post(url + "/slots/0?action=save", json={"filename": "a.bin"}), 501,
                        "not_supported_error")
    assert error["message"] == "This server does not support slots action. Start it with `--slot-save-path`"
    llama_error(HTTP.post(url + "/props", json={}), 501, "not_supported_error")


# ---- OpenAI chat ------------------------------------------------------------------------------------------

def test_openai_chat_has_timings_fingerprint_and_a_null_role_chunk(url, model):
    import openai
    body = post(url, "/v1/chat/completions", model=model, messages=HI, max_tokens=6, temperature=0, top_k=5,
                min_p=0.1, cache_prompt=True, n_probs=2)
    usage, timings = body["usage"], body["timings"]
    assert body["system_fingerprint"] == f"llamay-{llamay.__version__}"
    assert timings["predicted_n"] == usage["completion_tokens"]
    assert timings["cache_n"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
    assert all(len(t["top_logprobs"]) == 2 for t in body["choices"][0]["logprobs"]["content"])
    r = HTTP.post(url + "/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 6,
                                                      "temperature": 0, "top_k": 5, "min_p": 0.1, "stream": True})
    chunks = [json.loads(b[len("data: "):]) for b in r.text.removesuffix("\n\n").split("\n\n")[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "timings" in chunks[-1] and not any("timings" in c for c in chunks[:-1])
    oai = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    streamed = oai.chat.completions.create(model=model, messages=HI, max_tokens=6, temperature=0, stream=True,
                                           extra_body={"top_k": 5, "min_p": 0.1})
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == body["choices"][0]["message"]["content"]


# ---- embeddings ---------------------------------------------------------------------------------------------

def test_native_embeddings_and_mixed_inputs(url, model):
    native = post(url, "/embedding", content="Hello world")
    assert [e["index"] for e in native] == [0] and len(native[0]["embedding"]) == 1
    v1 = post(url, "/v1/embeddings", model=model, input="Hello world")["data"][0]["embedding"]
    assert native[0]["embedding"][0] == v1
    raw = np.asarray(post(url, "/embeddings", input="Hello world", embd_normalize=-1)[0]["embedding"][0], np.float32)
    l2 = (raw.astype(np.float64) / np.sqrt(np.square(raw.astype(np.float64)).sum())).astype(np.float32)
    assert l2.tolist() == v1
    ids = tokens(url, "Hello world")
    mixed = post(url, "/v1/embeddings", model=model, input=["Hello world", ids])["data"]
    assert mixed[0]["embedding"] == mixed[1]["embedding"] == v1


# ---- llama-server's flags --------------------------------------------------------------------------------

def test_server_defaults_template_and_pooling_flags(flagged, url):
    props = HTTP.get(flagged + "/props").json()
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["n_predict"], params["seed"]) == (0.0, 8, 5)
    assert props["chat_template"] == CHATML_SOURCE and props["total_slots"] == 2
    mine = complete(flagged, prompt=PROMPT)
    assert mine["content"] == complete(url, prompt=PROMPT, n_predict=8, temperature=0)["content"]
    assert mine["generation_settings"]["seed"] == 5
    text = post(flagged, "/apply-template", messages=HI)["prompt"]
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert post(flagged, "/v1/chat/completions/input_tokens", messages=HI)["input_tokens"] == len(tokens(url, text))
    # Anthropic's count too is of the prompt the server's template renders (it counted the model's own)
    assert post(flagged, "/v1/messages/count_tokens", messages=HI)["input_tokens"] == len(tokens(url, text))
    chat = post(flagged, "/v1/chat/completions", messages=HI)
    assert chat["choices"][0]["message"]["content"] == complete(url, prompt=text, n_predict=8, temperature=0)["content"]
    rows = post(flagged, "/embeddings", content="Hello world")[0]["embedding"]
    raw = post(url, "/embedding", content="Hello world", embd_normalize=-1)[0]["embedding"][0]
    assert len(rows) == len(tokens(flagged, "Hello world")) and rows[-1] == raw  # SmolLM2 pools its last token
    assert HTTP.post(flagged + "/v1/embeddings", json={"input": "Hello world"}).status_code == 400


def test_infill_is_llamacpps_layout_on_the_vocabularys_fim_tokens(flagged):
    """FIM_REP by text, FIM_SEP from the metadata: llama.cpp's repo-level pattern (format_prompt_infill)."""
    prefix, suffix, prompt = "def add(a, b):\n    return", "\n\nprint(add(2, 3))\n", " a"
    r = post(flagged, "/infill", input_prefix=prefix, input_suffix=suffix, prompt=prompt,
             input_extra=[{"filename": "util.py", "text": "ONE = 1\n"}], return_tokens=True)

    def t(text):
        return tokens(flagged, text, special=False)
    want = ([FIM_REP] + t("myproject\n") + [FIM["sep"]] + t("util.py\n") + t("ONE = 1\n") + [FIM["sep"]]
            + t("filename\n") + [FIM["pre"]] + t(prefix) + tokens(flagged, prompt) + [FIM["suf"]] + t(suffix)
            + [FIM["mid"]])
    assert r["tokens_evaluated"] == len(want) and r["prompt"] == post(flagged, "/detokenize", tokens=want)["content"]
    assert r["content"] == complete(flagged, prompt=want)["content"] and r["tokens_predicted"] == 8
    for extra in ({}, {"filename": 123, "text": "abc"}):
        llama_error(HTTP.post(flagged + "/infill", json={"input_prefix": prefix, "input_suffix": suffix,
                                                         "input_extra": [extra]}), 400, "invalid_request_error")


def test_slot_save_restore_erase(flagged, fresh, slot_dir):
    """As llama.cpp's test_slot_save: a restored slot's tokens are cache hits for the next prompt extending
    them, on a server that never computed them, and it continues exactly as the original."""
    prompt = "Slots remember: the quick brown fox"
    first = complete(flagged, prompt=prompt, id_slot=1, return_tokens=True)
    assert first["id_slot"] == 1 and first["timings"]["cache_n"] == 0
    saved = post(flagged, "/slots/1?action=save", filename="slot1.bin")
    assert saved["n_saved"] == first["tokens_cached"] == first["tokens_evaluated"] + first["tokens_predicted"]
    assert saved["n_written"] == (slot_dir / "slot1.bin").stat().st_size and saved["id_slot"] == 1
    assert HTTP.get(flagged + "/slots").json()[1]["n_prompt_tokens"] == first["tokens_evaluated"]
    restored = post(fresh, "/slots/0?action=restore", filename="slot1.bin")
    assert (restored["n_restored"], restored["n_read"]) == (saved["n_saved"], saved["n_written"])
    longer = tokens(fresh, prompt) + first["tokens"] + tokens(fresh, " and then")
    after = complete(fresh, prompt=longer, n_predict=8, temperature=0, id_slot=0, cache_prompt=True)
    assert after["timings"]["cache_n"] == saved["n_saved"]
    assert after["timings"]["prompt_n"] == len(longer) - saved["n_saved"]
    assert after["content"] == complete(flagged, prompt=longer)["content"]  # restored == continuous
    for path, body, message in (("/slots/x?action=save", {"filename": "a"}, "Invalid slot ID"),
                                ("/slots/7?action=save", {"filename": "a"}, "Invalid slot ID"),
                                ("/slots/0?action=load", {"filename": "a"}, "Invalid action"),
                                ("/slots/0?action=save", {"filename": "../a"}, "Invalid filename")):
        assert llama_error(HTTP.post(fresh + path, json=body), 400, "invalid_request_error")["message"] == message
    missing = llama_error(HTTP.post(fresh + "/slots/1?action=restore", json={"filename": "nope.bin"}), 400,
                          "invalid_request_error")
    assert missing["message"].startswith("Unable to restore slot") and str(slot_dir) not in missing["message"]
    assert post(fresh, "/slots/0?action=erase") == {"id_slot": 0, "n_erased": after["tokens_cached"]}  # its last
    assert post(fresh, "/slots/0?action=erase")["n_erased"] == 0
    llama_error(HTTP.post(fresh + "/slots/1?action=save", json={"filename": "empty.bin"}), 400,
                "invalid_request_error")


def test_flags_map_to_settings(tmp_path, fixtures_dir):
    def parsed(*argv):
        return serve_llamacpp.settings(build_parser().parse_args(["serve", *argv]))
    template = fixtures_dir / "templates" / "Qwen-Qwen3-0.6B.jinja"
    got = parsed("--temp", "0.3", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.1", "--seed", "-1", "-n", "-1",
                 "--chat-template-file", str(template), "--reasoning-format", "deepseek", "--pooling", "mean",
                 "--slot-save-path", str(tmp_path))
    assert got == {"sampling": {"temperature": 0.3, "top_k": 5, "top_p": 0.9, "min_p": 0.1}, "n_predict": None,
                   "chat_template": template.read_text(), "reasoning_format": "deepseek", "enable_thinking": None,
                   "pooling": "mean",
                   "slot_save_path": str(tmp_path), "routes": Routes(), "tags": (), "verbose": False}
    assert parsed("-v")["verbose"] is True and parsed("--verbose")["verbose"] is True
    gated = parsed("--no-slots", "--no-metrics", "--no-ui", "--tags", "chat, fim,", "--no-jinja")
    assert (gated["routes"], gated["tags"]) == (Routes(slots=False, metrics=False, ui=False), ("chat", "fim"))
    assert [parsed(*a)["enable_thinking"] for a in (["-rea", "on"], ["--reasoning", "auto"], ["--reasoning", "off"])] \
        == [True, True, False]
    command_r = ChatTemplate(parsed("--chat-template", "command-r")["chat_template"])  # llama.cpp's built-in names
    assert command_r.render([{"role": "user", "content": " Hi "}]) \
        == "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    assert ChatTemplate(parsed("--chat-template", "llama3")["chat_template"]).render(HI, add_generation_prompt=False) \
        == "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
    assert parsed()["sampling"] == {} and parsed("--chat-template", "{{ 'x' }}")["chat_template"] == "{{ 'x' }}"
    for argv in (["--context-shift"], ["--chat-template", "llama9"], ["--slot-save-path", str(tmp_path / "no")],
                 ["--chat-template", "chatml", "--chat-template-file", str(template)], ["--chat-template", "{% if %}"]):
        with pytest.raises(CLIError):
            parsed(*argv)
    for argv in (["--top-p", "2"], ["--temp", "-1"], ["-n", "-2"], ["--pooling", "max"], ["--reasoning", "yes"]):
        with pytest.raises(SystemExit):
            parsed(*argv)


def test_long_flags_may_be_spelled_with_underscores_as_llama_server_reads_them():
    argv = serve_llamacpp.dashed(["serve", "--backend_sampling", "--ctx_size=64", "--slot_save_path", "a_b", "-n", "1"])
    assert argv == ["serve", "--backend-sampling", "--ctx-size=64", "--slot-save-path", "a_b", "-n", "1"]
    args = build_parser().parse_args(argv)
    assert (args.backend_sampling, args.ctx_size, args.slot_save_path) == (True, 64, "a_b")


# ---- __verbose, prefill, embeddings in the metrics ----------------------------------------------------------

def test_verbose_is_the_raw_result_of_the_rendered_prompt(url, model, flagged):
    """llama-server's `verbose` (and -v): the chat result carries `__verbose`, the /completion result of the
    prompt the template rendered; the stream's last chunk carries it too."""
    messages = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
    body = {"model": model, "messages": messages, "max_tokens": 4, "temperature": 0}
    text = post(url, "/apply-template", messages=messages)["prompt"]
    chat = post(url, "/v1/chat/completions", **body, verbose=True)
    raw = chat["__verbose"]
    assert raw["prompt"] == text and raw["content"] == chat["choices"][0]["message"]["content"]
    assert (raw["tokens_evaluated"], raw["tokens_predicted"]) == (chat["usage"]["prompt_tokens"], 4)
    assert raw["content"] == complete(url, prompt=text, n_predict=4, temperature=0)["content"]
    assert "__verbose" not in post(url, "/v1/chat/completions", **body, verbose=False)
    assert "__verbose" not in post(url, "/v1/chat/completions", **body)
    r = HTTP.post(url + "/v1/chat/completions", json={**body, "verbose": True, "stream": True})
    chunks = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n") if b.startswith("data: {")]
    assert [("__verbose" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1]["__verbose"]["prompt"] == text and chunks[-1]["__verbose"]["content"] == raw["content"]
    assert "__verbose" in post(flagged, "/v1/chat/completions", messages=messages)  # serve -v
    assert "__verbose" not in post(flagged, "/v1/chat/completions", messages=messages, verbose=False)


def test_a_last_assistant_message_is_a_prefill(url, model):
    """As llama-server: the reply continues the last assistant message, rendered unclosed after the
    generation prompt (vLLM's continue_final_message says the same); two assistant messages at the end, or
    continue_final_message with add_generation_prompt, are a 400."""
    prefill = [*HI, {"role": "assistant", "content": "The capital"}]
    body = {"model": model, "max_tokens": 4, "temperature": 0, "verbose": True}
    text = post(url, "/apply-template", messages=HI)["prompt"] + "The capital"
    for extra in ({}, {"continue_final_message": True, "add_generation_prompt": False}):
        chat = post(url, "/v1/chat/completions", messages=prefill, **body, **extra)
        assert chat["__verbose"]["prompt"] == text
        assert chat["choices"][0]["message"]["content"] == complete(url, prompt=text, n_predict=4,
                                                                    temperature=0)["content"]
    closed = post(url, "/v1/chat/completions", messages=prefill, **body, continue_final_message=False)
    assert closed["__verbose"]["prompt"].endswith("The capital<|im_end|>\n<|im_start|>assistant\n")
    for bad in ({"messages": [*prefill, {"role": "assistant", "content": "again"}]},
                {"messages": prefill, "continue_final_message": True, "add_generation_prompt": True}):
        r = HTTP.post(url + "/v1/chat/completions", json={"model": model, **bad})
        assert r.status_code == 400 and "error" in r.json(), r.text


def _llamacpp_metrics(url: str) -> dict[str, float]:
    lines = HTTP.get(url + "/metrics").text.splitlines()
    return {k: float(v) for k, v in (line.split(" ") for line in lines if line.startswith("llamacpp:"))}


def test_embeddings_of_empty_text_and_in_the_llamacpp_metrics(fixtures_dir, url):
    """An empty input is embedded where the model adds special tokens (BERT's [CLS] [SEP]), as llama-server
    does, and a 400 where it adds none (SmolLM2); embedded tokens and passes count in the llamacpp: metrics."""
    srv = LiveServer(["-m", str(fixtures_dir / "models" / "all-minilm-l6-v2-f16.gguf"), "--threads", "2"])
    try:
        before = _llamacpp_metrics(srv.url)
        out = post(srv.url, "/v1/embeddings", input=["", "hello world", "goodbye world"])
        assert len(out["data"]) == 3 and len(out["data"][0]["embedding"]) == 384
        after = _llamacpp_metrics(srv.url)
        n = out["usage"]["prompt_tokens"]
        assert n == 2 + 4 + 4  # [CLS] [SEP] around each text's tokens
        assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == n
        assert after["llamacpp:n_decode_total"] - before["llamacpp:n_decode_total"] == 1  # one batch
        assert after["llamacpp:tokens_predicted_total"] == before["llamacpp:tokens_predicted_total"] == 0
    finally:
        srv.stop()
    error = llama_error(HTTP.post(url + "/embedding", json={"content": ""}), 400, "invalid_request_error")
    assert "no tokens" in error["message"]
    error = llama_error(HTTP.post(url + "/embedding", json={"content": "hello " * 2100}), 400,
                        "exceed_context_size_error")
    assert "input is too large to process" in error["message"]  # what llama-server's says, which clients match
