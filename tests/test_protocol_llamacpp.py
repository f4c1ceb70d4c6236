"""llama-server's native protocol as pure converters (no server, no model): prompt shapes, sampling knobs
and the ones refused, `samplers`, logit_bias forms, the FIM layout, slot file names, error bodies, the
native result and stream shapes, the OpenAI chat additions (judged by the SDK's types), structured-output
fields, native embedding normalisation, the reasoning formats and the server-wide defaults. References:
llama.cpp tools/server (server-schema.cpp, server-common.cpp format_prompt_infill, server-task.cpp),
common/common.cpp (fs_validate_filename, common_embd_normalize) and llama-vocab.cpp's FIM texts."""
import json
import math

import numpy as np
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from conftest import SHARED
from llamay.chat import ChatTemplate
from llamay.chat.reasoning import ReasoningSplitter, opened
from llamay.events import Delta, Finish, TokenLogprob, TopLogprob, Usage
from llamay.gguf import GGUFReader
from llamay.server.registry import Settings
from llamay.server.protocol import embeddings as emb_conv
from llamay.server.protocol import llamacpp as proto
from llamay.server.prepare import grammar_spec, sampling_params, with_server_defaults
from llamay.server.protocol.base import ProtocolError, ResponseMeta
from llamay.server.protocol.llamacpp_infill import FimVocab, Infill, infill_ids, missing
from llamay.server.protocol.llamacpp_out import pick_fields
from llamay.server.protocol.llamacpp_params import mixed_ids, parse_prompts
from llamay.server.protocol.openai import ChatOutput, error_body as openai_error_body, parse_chat, parse_responses
from llamay.server.protocol.request import FRESH_SEED, GenRequest, LlamaOptions, OllamaOptions, Sampling
from llamay.server.protocol.timings import timings_body
from llamay.tokenizer import Tokenizer

META = ResponseMeta("cmpl-x", 1, "smollm2:135m")
USAGE = Usage(prompt_tokens=6, cached_tokens=2, completion_tokens=3, prompt_eval_ns=8_000_000, eval_ns=6_000_000)


def sse(frames: list[str]) -> list[dict]:
    assert all(f.startswith("data: ") and f.endswith("\n\n") for f in frames)
    return [json.loads(f[len("data: "):]) for f in frames]


# ---- prompts and knobs ------------------------------------------------------------------------------

@pytest.mark.parametrize("prompt, want", [
    ("text", ["text"]),
    ([12, 34, 56], [[12, 34, 56]]),
    ([12, 34, "string", 56], [[12, 34, "string", 56]]),  # a number anywhere: one mixed prompt
    (["a", "b"], ["a", "b"]),
    (["a", [1, 2], [3, "x"]], ["a", [1, 2], [3, "x"]]),
    ({"prompt_string": "s"}, ["s"]),
    (["a", {"prompt_string": [5, "t"]}], ["a", [5, "t"]]),
])
def test_prompt_shapes(prompt, want):
    assert parse_prompts(prompt) == want


@pytest.mark.parametrize("prompt", [[], [[]], 1.5, [True], {"x": 1}, [-1, 2],
                                    {"prompt_string": "a", "multimodal_data": ["AA=="]}])
def test_bad_prompts(prompt):
    with pytest.raises(ProtocolError) as e:
        parse_prompts(prompt)
    assert e.value.status == 400 and e.value.param == "prompt"


def test_mixed_ids_add_specials_only_to_a_first_text():
    calls = []

    def encode(text, add_special):
        calls.append((text, add_special))
        return [100 + len(text)]
    assert mixed_ids([7, "ab", 8, "c"], encode) == [7, 102, 8, 101] and calls == [("ab", False), ("c", False)]
    calls.clear()
    assert mixed_ids(["ab", 9], encode) == [102, 9] and calls == [("ab", True)]


def test_completion_fields():
    reqs = proto.parse_completion({"prompt": ["a", [1, 2]], "n_predict": -1, "temperature": -0.5, "top_p": 1.5,
                                   "top_k": -3, "seed": 4294967295, "stop": "\n", "id_slot": 1,
                                   "cache_prompt": False, "n_probs": 3, "return_tokens": True})
    assert [r.prompt for r in reqs] == ["a", [1, 2]]
    r = reqs[0]
    assert r.max_tokens is None and r.raw and r.model is None and r.stop == ["\n"]
    assert r.sampling == Sampling(temperature=0.0, top_p=1.0, top_k=0, seed=FRESH_SEED)  # clamped as llama-server
    assert r.logprobs and r.top_logprobs == 3 and r.llama == LlamaOptions(id_slot=1, return_tokens=True)
    assert proto.parse_completion({"prompt": "a", "max_tokens": 0})[0].max_tokens == 0  # the prompt only
    assert proto.parse_completion({"prompt": "a", "n_cmpl": 2})[0].n == 2


@pytest.mark.parametrize("body, param", [
    ({}, "prompt"),
    ({"prompt": ["a", "b"], "stream": True}, "prompt"),
    ({"prompt": "a", "n_predict": -2}, "n_predict"),
    ({"prompt": "a", "stop": [1]}, "stop"),
    ({"prompt": "a", "id_slot": -2}, "id_slot"),
    ({"prompt": "a", "logit_bias": [[1, True]]}, "logit_bias"),
    ({"prompt": "a", "logit_bias": [1, 2]}, "logit_bias"),
    ({"prompt": "a", "cache_prompt": "yes"}, "cache_prompt"),
    ({"prompt": "a", "grammar": "root ::= \"x\"", "json_schema": {}}, "grammar"),
])
def test_completion_bad_fields(body, param):
    with pytest.raises(ProtocolError) as e:
        proto.parse_completion(body)
    assert e.value.status == 400 and e.value.param == param


OFF = [("mirostat", 0), ("typical_p", 1.0), ("top_n_sigma", -1.0), ("dynatemp_range", 0.0), ("xtc_probability", 0.0),
       ("dry_multiplier", 0.0), ("min_keep", 1), ("n_indent", 0), ("t_max_predict_ms", 0), ("adaptive_target", -1.0),
       ("post_sampling_probs", False), ("timings_per_token", False), ("return_progress", False)]
ON = [("mirostat", 2), ("typical_p", 0.9), ("top_n_sigma", 1.0), ("dynatemp_range", 0.5), ("xtc_probability", 0.5),
      ("dry_multiplier", 0.8), ("min_keep", 5), ("n_indent", 4), ("t_max_predict_ms", 100), ("adaptive_target", 0.5)]


@pytest.mark.parametrize("name", ["timings_per_token", "return_progress", "post_sampling_probs"])
def test_stream_telemetry_and_post_sampling_probs_are_taken_and_typed(name):
    """llama-server's timings_per_token, return_progress, post_sampling_probs: LlamaOptions fields (the
    Responses route takes the first two); not a boolean: 400."""
    chat = {"messages": [{"role": "user", "content": "a"}]}
    for value in (True, False):
        assert getattr(proto.parse_completion({"prompt": "a", name: value})[0].llama, name) is value
        assert getattr(parse_chat({**chat, name: value}).llama, name) is value
        if name != "post_sampling_probs":
            assert getattr(parse_responses({"input": "a", name: value}).llama, name) is value
    with pytest.raises(ProtocolError) as e:
        proto.parse_completion({"prompt": "a", name: "yes"})
    assert e.value.status == 400 and e.value.param == name


def test_per_request_lora_ids_and_scales():
    """llama-server's `lora` (adapters by id; test_lora.py checks what each choice generates)."""
    lora = [{"id": 1, "scale": 0.5}, {"id": 0, "scale": 2}]
    assert proto.parse_completion({"prompt": "a", "lora": lora})[0].llama.lora == ((1, 0.5), (0, 2.0))
    assert parse_chat({"messages": [{"role": "user", "content": "a"}], "lora": []}).llama.lora == ()
    for bad in ([{"id": "0", "scale": 1}], [{"id": 0}], [{"id": 0, "scale": float("inf")}], [3], {"id": 0}):
        with pytest.raises(ProtocolError) as e:
            proto.parse_completion({"prompt": "a", "lora": bad})
        assert e.value.status == 400 and e.value.param == "lora"


@pytest.mark.parametrize("name, value", OFF)
def test_samplers_we_do_not_run_are_accepted_when_off(name, value):
    base = proto.parse_completion({"prompt": "a"})[0]
    assert proto.parse_completion({"prompt": "a", name: value})[0] == base
    parse_chat({"messages": [{"role": "user", "content": "a"}], name: value})


@pytest.mark.parametrize("name, value", ON)
def test_samplers_we_do_not_run_are_refused_when_on(name, value):
    for parse, body in ((proto.parse_completion, {"prompt": "a"}),
                        (parse_chat, {"messages": [{"role": "user", "content": "a"}]})):
        with pytest.raises(ProtocolError) as e:
            parse({**body, name: value})
        assert e.value.status == 400 and e.value.param == name and name in e.value.message


def test_xtc_and_dry_turned_off_by_their_second_knob():
    for body in ({"xtc_probability": 0.5, "xtc_threshold": 0.6}, {"dry_multiplier": 0.8, "dry_penalty_last_n": 0}):
        assert proto.parse_completion({"prompt": "a", **body})[0].sampling.given() == {}


LLAMA_DEFAULT_SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


@pytest.mark.parametrize("samplers, want", [
    (LLAMA_DEFAULT_SAMPLERS, {}),
    ("edskypmxt", {}),  # the same list as llama.cpp's letters
    (["top-k", "nucleus", "minp", "temp"], {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}),
    (["top_k", "temperature"], {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                                "top_p": 1.0, "min_p": 0.0}),
    (["penalties", "top_k", "top_p", "min_p"], {"temperature": 1.0}),
])
def test_samplers_left_out_are_turned_off(samplers, want):
    assert proto.parse_completion({"prompt": "a", "samplers": samplers})[0].sampling.given() == want


@pytest.mark.parametrize("samplers", [["temperature", "top_k"], ["infill", "temperature"], ["bogus"],
                                      ["top_k", "top_k", "temperature"], "tk", [3]])
def test_samplers_we_cannot_honour_are_refused(samplers):
    with pytest.raises(ProtocolError) as e:
        proto.parse_completion({"prompt": "a", "samplers": samplers})
    assert e.value.param == "samplers"


class _Vocab:
    """llm.tokenize / llm.tokenizer over the starcoder test vocabulary (for sampling_params)."""

    def __init__(self, tok: Tokenizer):
        self.tokenizer = tok

    def tokenize(self, text, add_special=True, parse_special=False):
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)


@pytest.fixture(scope="module")
def starcoder(fixtures_dir) -> Tokenizer:
    return Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-starcoder.gguf"))


def test_logit_bias_forms_and_ignore_eos(starcoder):
    llm = _Vocab(starcoder)
    hello = starcoder.encode(" hello world", add_special=False)
    for raw in ([[" hello world", False], [5, 2.5]], {" hello world": False, "5": 2.5}):
        req = proto.parse_completion({"prompt": "a", "logit_bias": raw, "ignore_eos": True})[0]
        params = sampling_params(llm, req)
        want = {**dict.fromkeys(hello, -math.inf), 5: 2.5, **dict.fromkeys(starcoder.eog_ids, -math.inf)}
        assert params.logit_bias == want and len(hello) == 2


# ---- FIM ----------------------------------------------------------------------------------------------

def test_fim_tokens_of_the_test_vocabularies(fixtures_dir):
    """By llama.cpp's texts: starcoder's <fim_*> tokens; deepseek-coder's <｜fim▁begin｜> family."""
    def fim(name):
        return Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / f"ggml-vocab-{name}.gguf")).fim_ids
    assert fim("starcoder") == {"pre": 1, "suf": 3, "mid": 2, "pad": 4}
    assert fim("refact") == {"pre": 1, "suf": 3, "mid": 2, "pad": 4, "rep": 18}
    assert fim("deepseek-coder") == {"pre": 32016, "suf": 32015, "mid": 32017}
    assert fim("llama-spm") == {} and missing({}) == ("prefix token is missing. suffix token is missing. "
                                                        "middle token is missing. ")


def test_infill_layout_and_cuts(starcoder):
    """No FIM_REP / FIM_SEP: each extra chunk after llama.cpp's snippet separator; prefix and suffix cut to
    share a batch 3:1 from the cursor outwards, the extra chunks to what the context leaves."""
    def enc(text, special=False):
        return starcoder.encode(text, add_special=False, parse_special=special)
    vocab = FimVocab(starcoder.fim_ids, enc, None)
    before, after = "def add(first, second):\n    total = first + second\n    return", "\n\nprint(add(2, 3))\n"
    fill = Infill(before, after, [("a.py", "X = 1\n")], " total")
    prefix, suffix, prompt = enc(before), enc(after), enc(" total", True)
    extra = enc("\n\n--- snippet ---\n\n") + enc("X = 1\n")
    whole = infill_ids(fill, vocab, n_batch=512, n_predict=-1, n_ctx=4096)
    assert whole == extra + [1] + prefix + prompt + [3] + suffix + [2]
    cut = infill_ids(fill, vocab, n_batch=16, n_predict=4, n_ctx=16 + 8 + 3)
    assert cut == extra[-3:] + [1] + prefix[-12:] + prompt + [3] + suffix[:16 // 4 - 2 - len(prompt)] + [2]
    assert len(prefix) > 12 and len(suffix) > 1 and len(extra) > 3


def test_infill_fields():
    req, fill = proto.parse_infill({"input_prefix": "a", "input_suffix": ["b", 7], "prompt": "c", "n_predict": 3,
                                    "input_extra": [{"text": "t"}, {"filename": "f.py", "text": "u"}]})
    assert fill == Infill("a", ["b", 7], [("tmp", "t"), ("f.py", "u")], "c") and req.max_tokens == 3


@pytest.mark.parametrize("body", [{"input_suffix": "b"}, {"input_prefix": "a"},
                                  {"input_prefix": "a", "input_suffix": "b", "prompt": 1},
                                  {"input_prefix": "a", "input_suffix": "b", "input_extra": {}},
                                  *({"input_prefix": "a", "input_suffix": "b", "input_extra": [x]} for x in
                                    ({}, {"filename": "ok"}, {"filename": 123}, {"filename": 123, "text": "abc"},
                                     {"filename": "x", "text": 456}))])
def test_infill_bad_fields(body):
    """As llama.cpp's test_invalid_input_extra_req: each is a 400."""
    with pytest.raises(ProtocolError) as e:
        proto.parse_infill(body)
    assert e.value.status == 400


# ---- slots --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, ok", [("slot1.bin", True), ("a b.txt", True), ("é.bin", True), ("", False),
                                      ("../x", False), ("a/b", False), ("a\\b", False), ("..", False), (".", False),
                                      ("x.", False), (" x", False), ("x ", False), ("a:b", False), ("a\x01", False),
                                      ("a\u2215b", False), ("a\ufffd", False), ("\ud800", False), ("x" * 256, False)])
def test_slot_file_names(name, ok):
    assert proto.valid_filename(name) is ok


def test_slot_actions():
    assert proto.parse_slot_action("1", "save") == (1, "save")
    for args, message in ((("x", "save"), "Invalid slot ID"), (("0", "load"), "Invalid action"),
                          (("0", None), "Invalid action")):
        with pytest.raises(ProtocolError) as e:
            proto.parse_slot_action(*args)
        assert (e.value.status, e.value.message) == (400, message)
    with pytest.raises(ProtocolError) as e:
        proto.parse_filename({"filename": "../etc"})
    assert e.value.message == "Invalid filename"


# ---- responses -------------------------------------------------------------------------------------------

def test_error_bodies():
    err = ProtocolError(400, "too long", "context_length", "messages", {"n_prompt_tokens": 9, "n_ctx": 8})
    message = "the request exceeds the available context size, try increasing it: too long"  # llama-server's start
    assert proto.error_body(err) == {"error": {"code": 400, "message": message, "type": "exceed_context_size_error",
                                               "n_prompt_tokens": 9, "n_ctx": 8}}
    assert openai_error_body(err) == {"error": {"message": "too long", "type": "exceed_context_size_error",
                                                "param": "messages", "code": "context_length_exceeded",
                                                "n_prompt_tokens": 9, "n_ctx": 8}}
    assert proto.error_body(ProtocolError(501, "no", "not_supported"))["error"]["type"] == "not_supported_error"


def test_timings():
    assert timings_body(USAGE) == {"cache_n": 2, "prompt_n": 4, "prompt_ms": 8.0, "prompt_per_token_ms": 2.0,
                                   "prompt_per_second": 500.0, "predicted_n": 3, "predicted_ms": 6.0,
                                   "predicted_per_token_ms": 3.0, "predicted_per_second": 2e3 / 6.0}  # 2 steps
    assert timings_body(Usage(prompt_tokens=1))["predicted_per_second"] == 0.0
    one = timings_body(Usage(prompt_tokens=1, completion_tokens=1, eval_ns=5))  # from the prompt's logits
    assert (one["predicted_per_second"], one["predicted_per_token_ms"]) == (0.0, 0.0)


def _view() -> proto.ModelView:
    return proto.ModelView("smollm2:135m", "/m.gguf", 2048, "", "<s>", "</s>", lambda ids: "|".join(map(str, ids)))


LO = TokenLogprob("lo", -0.5, [108, 111], [TopLogprob("lo", -0.5, [108, 111], 7)], 7)
SCRIPT = [Delta(0, content="Hel", tokens=[5]), Delta(0, content="lo", tokens=[6, 7], logprobs=[LO]),
          Finish(0, "stop", USAGE, [1, 2, 3, 4, 5, 6, 5, 6, 7], "\n\n")]


def test_native_result_and_stream():
    req = proto.parse_completion({"prompt": "x", "stream": True, "n_probs": 1})[0]
    out = proto.CompletionOutput(req, ResponseMeta("cmpl-x", 1, "smollm2:135m", slot=2), Usage(6), _view())
    events = sse([f for ev in SCRIPT for f in out.feed(ev)] + out.end())
    assert [(e["content"], e["tokens"], e["stop"]) for e in events] == [("Hel", [5], False), ("lo", [6, 7], False),
                                                                       ("", [], True)]
    assert events[1]["completion_probabilities"] == [{"id": 7, "token": "lo", "bytes": [108, 111], "logprob": -0.5,
                                                      "top_logprobs": [{"id": 7, "token": "lo", "bytes": [108, 111],
                                                                        "logprob": -0.5}]}]
    last = events[-1]
    assert (last["stop_type"], last["stopping_word"], last["id_slot"], last["prompt"]) == ("word", "\n\n", 2,
                                                                                          "1|2|3|4|5|6")
    assert last["tokens_evaluated"] == 6 and last["tokens_predicted"] == 3 and last["timings"] == timings_body(USAGE)
    assert last["generation_settings"]["n_probs"] == 1 and "completion_probabilities" not in last
    whole = proto.CompletionOutput(proto.parse_completion({"prompt": "x", "return_tokens": True})[0], META,
                                   Usage(6), _view())
    for ev in SCRIPT:
        whole.feed(ev)
    body = whole.body()
    assert (body["content"], body["tokens"], body["stop"], body["has_new_line"]) == ("Hello", [5, 6, 7], True, False)


def test_an_error_mid_stream_is_a_data_event():
    out = proto.CompletionOutput(proto.parse_completion({"prompt": "x", "stream": True})[0], META, Usage(6), _view())
    frames = out.feed(SCRIPT[0]) + out.fail(ProtocolError(503, "out of KV cache memory", "overloaded"))
    assert sse(frames)[-1] == {"error": {"code": 503, "message": "out of KV cache memory", "type": "unavailable_error"}}


def test_several_choices_are_a_list_and_response_fields_pick():
    req = proto.parse_completion({"prompt": "x", "n": 2, "n_predict": 4,
                                  "response_fields": ["content", "generation_settings/n_predict"]})[0]
    out = proto.CompletionOutput(req, META, Usage(6), _view(), first_index=3)
    for i in (1, 0):
        out.feed(Delta(i, content=f"c{i}", tokens=[i]))
        out.feed(Finish(i, "length", USAGE, [1]))
    assert out.body() == [{"content": "c0", "generation_settings/n_predict": 4},
                          {"content": "c1", "generation_settings/n_predict": 4}]
    assert pick_fields({"a": {"b": 1}}, ["a/c", "z"]) == {}


def test_generation_settings_of_the_defaults():
    """/props' params: llama.cpp's defaults; a random seed shows as LLAMA_DEFAULT_SEED."""
    s = proto.generation_settings(GenRequest(model=None), 2048, "m")
    assert (s["temperature"], s["top_k"], s["top_p"], s["min_p"], s["seed"], s["n_predict"]) == (
        0.8, 40, 0.95, 0.05, 4294967295, -1)
    assert s["samplers"] == ["penalties", "top_k", "top_p", "min_p", "temperature"] and s["mirostat"] == 0


def test_openai_chat_has_llama_servers_additions():
    req = parse_chat({"messages": [{"role": "user", "content": "a"}], "stream": True, "top_k": 5, "min_p": 0.1,
                      "cache_prompt": True, "n_probs": 2, "repeat_last_n": -1, "ignore_eos": True, "id_slot": 0})
    assert (req.sampling.top_k, req.sampling.min_p, req.sampling.repeat_last_n) == (5, 0.1, -1)
    assert req.logprobs and req.top_logprobs == 2 and req.llama.ignore_eos and req.llama.id_slot == 0
    out = ChatOutput(req, META)
    frames = [f for ev in (Delta(0, content="Hi"), Finish(0, "stop", USAGE)) for f in out.feed(ev)] + out.end()
    chunks = sse(frames[:-1])
    assert frames[-1] == "data: [DONE]\n\n"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(c["system_fingerprint"] == "llamay-0.1.0" for c in chunks)
    assert [("timings" in c) for c in chunks] == [False, False, True] and chunks[-1]["timings"] == timings_body(USAGE)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    whole = ChatOutput(parse_chat({"messages": [{"role": "user", "content": "a"}]}), META)
    for ev in (Delta(0, content="Hi"), Finish(0, "stop", USAGE)):
        whole.feed(ev)
    body = whole.body()
    assert ChatCompletion.model_validate(body).system_fingerprint == "llamay-0.1.0"
    assert body["timings"] == timings_body(USAGE)


SCHEMA = {"type": "object", "properties": {"pet": {"enum": ["cat", "dog"]}}, "required": ["pet"]}
ASK = [{"role": "user", "content": "a"}]


def test_structured_output_fields():
    """response_format json_object with a schema, and llama-server's top-level json_schema, constrain to
    the schema; response_format's own schema wins; a grammar beside a schema, or a schema that is not an
    object, is refused."""
    def spec(body):
        return grammar_spec(parse_chat({"messages": ASK, **body}).format, None)
    assert spec({"response_format": {"type": "json_object", "schema": SCHEMA}}) == ("json_schema", SCHEMA)
    assert spec({"json_schema": SCHEMA}) == ("json_schema", SCHEMA)
    assert spec({"json_schema": {}}) == ("json_schema", {"type": "object"})
    assert spec({"response_format": {"type": "json_object"}, "json_schema": SCHEMA}) == ("json_schema", SCHEMA)
    assert spec({"response_format": {"type": "json_object"}}) == ("json_object", None)
    nested = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    assert spec({"response_format": nested, "json_schema": {"type": "string"}}) == ("json_schema", SCHEMA)
    assert grammar_spec(proto.parse_completion({"prompt": "a", "json_schema": SCHEMA})[0].format, None) == (
        "json_schema", SCHEMA)
    for body, param in (({"json_schema": SCHEMA, "grammar": "root ::= \"a\""}, "grammar"),
                        ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "grammar"),
                        ({"json_schema": "x"}, "json_schema"),
                        ({"response_format": {"type": "json_object", "schema": []}}, "response_format.schema")):
        with pytest.raises(ProtocolError) as e:
            parse_chat({"messages": ASK, **body})
        assert e.value.param == param


# ---- embeddings ------------------------------------------------------------------------------------------

def test_native_embedding_normalisations():
    """common_embd_normalize: -1 raw, 0 max-abs to 32760, 1 taxicab, 2 Euclidean, p > 2 a p-norm."""
    v = np.array([3.0, -4.0, 1.0], np.float32)
    assert emb_conv.embd_normalize(v, -1).tolist() == v.tolist()
    assert np.abs(emb_conv.embd_normalize(v, 0)).max() == pytest.approx(32760.0)
    assert np.abs(emb_conv.embd_normalize(v, 1)).sum() == pytest.approx(1.0)
    assert np.linalg.norm(emb_conv.embd_normalize(v, 2)) == pytest.approx(1.0)
    assert (np.abs(emb_conv.embd_normalize(v, 3).astype(np.float64)) ** 3).sum() == pytest.approx(1.0)
    assert emb_conv.embd_normalize(np.zeros(3, np.float32), 2).tolist() == [0.0, 0.0, 0.0]
    parts = {"content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}
    req = emb_conv.parse_native({"content": ["a", [1, "b"], parts], "embd_normalize": -1})
    assert req.inputs == ["a", [1, "b"], "cd"] and not req.normalize and req.embd_normalize == -1
    body = emb_conv.native_body([v, np.ones((2, 3), np.float32)], req)
    assert body == [{"index": 0, "embedding": [v.tolist()]}, {"index": 1, "embedding": [[1.0] * 3] * 2}]
    for bad in ({}, {"input": "a", "embd_normalize": -2}, {"input": [{"content": [{"type": "image_url"}]}]}):
        with pytest.raises(ProtocolError):
            emb_conv.parse_native(bad)


# ---- reasoning formats and server defaults ------------------------------------------------------------

def test_reasoning_formats():
    text = "<think>hm</think>4"
    assert ReasoningSplitter("{{ x }}", "deepseek").feed(text) == ("4", "hm")  # split whatever the template
    assert ReasoningSplitter("{{ '<think>' }}", "none").feed(text) == (text, "")
    assert ReasoningSplitter("{{ '<think>' }}").feed(text) == ("4", "hm")


def test_a_prompt_that_opens_the_reasoning_starts_the_output_inside_it():
    """Qwen3.5's and Nemotron 3's templates end the prompt with <think>: the output's thoughts come before
    a lone </think>."""
    source = (SHARED / "fixtures" / "templates" / "Qwen3.5-4B.jinja").read_text()
    prompt = ChatTemplate(source).render([{"role": "user", "content": "hi"}])
    assert opened(prompt) and not opened("<think>hm</think>\n")
    assert ReasoningSplitter(source, thinking=True).feed("hm</think>4") == ("4", "hm")
    assert ReasoningSplitter(source, "none", thinking=True).feed("hm</think>4") == ("hm</think>4", "")


def test_reasoning_format_names_are_checked():
    with pytest.raises(ProtocolError):
        parse_chat({"messages": ASK, "reasoning_format": "deepseek-legacy"})


def test_server_defaults_fill_only_what_the_request_left_to_its_api():
    settings = Settings(sampling={"temperature": 0.1, "top_k": 3, "seed": 9}, n_predict=7, chat_template="T",
                        reasoning_format="none")
    chat = with_server_defaults(parse_chat({"messages": ASK, "temperature": 0.5}), settings)
    assert chat.run_sampling() == Sampling(temperature=0.5, top_p=1.0, top_k=3, seed=9) and chat.max_tokens == 7
    assert chat.chat.template == "T" and chat.chat.reasoning_format == "none"
    native = with_server_defaults(proto.parse_completion({"prompt": "a", "n_predict": 2, "seed": -1})[0], settings)
    assert native.run_sampling() == Sampling(temperature=0.1, top_k=3, seed=FRESH_SEED) and native.max_tokens == 2
    ollama = with_server_defaults(GenRequest(model=None, sampling=Sampling(top_k=40),
                                             sampling_defaults=Sampling(temperature=0.8), ollama=OllamaOptions()),
                                  settings)
    assert ollama.run_sampling() == Sampling(temperature=0.1, top_k=40, seed=9)


def test_reasoning_flag_is_enable_thinking_unless_the_request_sets_it():
    """serve --reasoning on|auto|off: the templates' enable_thinking true/false; chat_template_kwargs win."""
    for flag in (True, False):
        req = with_server_defaults(parse_chat({"messages": ASK}), Settings(enable_thinking=flag))
        assert req.chat.template_kwargs == {"enable_thinking": flag}
    kwargs = {"chat_template_kwargs": {"enable_thinking": True, "x": 1}}
    req = with_server_defaults(parse_chat({"messages": ASK, **kwargs}), Settings(enable_thinking=False))
    assert req.chat.template_kwargs == {"enable_thinking": True, "x": 1}
    assert with_server_defaults(parse_chat({"messages": ASK}), Settings()).chat.template_kwargs == {}


def test_templates_get_todays_date_and_firefunction_its_functions():
    """As llama.cpp: date_string (Llama 3.x's templates) always; datetime and the tools' JSON for a template
    that calls with functools[ (firefunction v2)."""
    from datetime import datetime
    from llamay.server.render import dated_context
    now = datetime(2025, 3, 4, 5, 6, 7)
    assert dated_context("{{ date_string }}", None, now) == {"date_string": "04 Mar 2025"}
    tools = [{"type": "function", "function": {"name": "f"}}]
    fire = dated_context("functools[", tools, now)
    assert fire["datetime"] == "Mar 04 2025 05:06:07 GMT" and json.loads(fire["functions"]) == tools
    assert dated_context("functools[", None, now)["functions"] == ""


def test_slots_are_chosen_by_the_longest_shared_prefix():
    """An idle slot whose tokens share the longest prefix with the prompt, then the least recently used;
    id_slot pins; all busy: the same choice among all."""
    from llamay.server.slots import SlotTable
    table = SlotTable(3)
    a, b = table.take("m", [1, 2, 3], None), table.take("m", [9], None)
    assert (a.id, b.id) == (0, 1)  # empty slots tie: the least recently used (never used) first
    for slot, tokens in ((a, [1, 2, 3, 4]), (b, [1, 2, 9])):
        slot.tokens = tokens
        table.release(slot)
    assert table.take("m", [1, 2, 3, 7], None).id == 0  # 3 shared beats 2
    assert table.take("m", [1, 2, 9, 9], None).id == 1
    assert table.take("m", [5], None).id == 2  # the last idle one
    assert table.take("m", [1, 2, 3, 4], None).id == 0  # every slot busy: the same choice among all
    assert table.take("m", [5], 2).id == 2  # pinned, busy or not
    with pytest.raises(ProtocolError):
        table.take("m", [5], 3)


def test_verbose_and_prefill_in_the_chat_request():
    """`verbose` taken as sent (None: serve -v's); a last assistant message is a prefill unless
    continue_final_message is false; two at the end, or continue_final_message with add_generation_prompt: 400."""
    hi = [{"role": "user", "content": "a"}]
    for value in (True, False, None):
        body = {"messages": hi} if value is None else {"messages": hi, "verbose": value}
        assert parse_chat(body).llama.verbose is value
    prefill = [*hi, {"role": "assistant", "content": "b"}]
    assert parse_chat({"messages": prefill}).chat.continue_final
    assert not parse_chat({"messages": prefill, "continue_final_message": False}).chat.continue_final
    assert not parse_chat({"messages": hi, "continue_final_message": True}).chat.continue_final
    for bad in ({"messages": hi, "verbose": "yes"}, {"messages": [*prefill, {"role": "assistant", "content": "c"}]},
                {"messages": prefill, "continue_final_message": True, "add_generation_prompt": True}):
        with pytest.raises(ProtocolError) as e:
            parse_chat(bad)
        assert e.value.status == 400
