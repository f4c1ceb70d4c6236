"""LoRA adapters (models/lora.py), written by llama.cpp's convert_lora_to_gguf.py from tiny peft adapters:
logits against transformers + peft, no further from float64 than llama.cpp's with the same adapter, the
determinism equalities with ==, snapshots that refuse other adapters, and bases that do not fit refused."""
from pathlib import Path

import numpy as np
import pytest

import llamay
from arch_models import build, rewrite, sha256, token_ids
from conftest import CACHE
from llamay.kv.snapshot_format import SnapshotError
from llamay.models import ModelFileError, UnsupportedModel
from llamay.settings import LoadOptions
from lora_cases import ADAPTERS, files, peft_logits

TIGHT, FLOOR = 1e-3, 2e-6  # as tests/test_arch_transformers.py
LLAMACPP = Path(__file__).parent / "fixtures" / "llamacpp_lora_logits.npz"
IDS = token_ids(300)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return files(tmp_path_factory.mktemp("lora"), CACHE, build)


def load(converted, name, scale=1.0, threads=1):
    bases, adapters = converted
    return llamay.load(bases[ADAPTERS[name][0]], threads=threads, kv="f32", lora=[(name, str(adapters[name]), scale)])


def rel(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_logits_match_peft(converted, name):
    got, ref = load(converted, name).logits(IDS), peft_logits(name, build, IDS)
    assert rel(got, ref) < TIGHT and (got.argmax(1) == ref.argmax(1)).all()
    plain = llamay.load(converted[0][ADAPTERS[name][0]], threads=1, kv="f32").logits(IDS)
    assert rel(plain, ref) > 0.05  # the adapter moves the logits far beyond the bound


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_no_further_from_float64_than_llamacpp(converted, name):
    fixture = np.load(LLAMACPP)
    bases, adapters = converted
    assert sha256(bases[ADAPTERS[name][0]]) == str(fixture[f"{name}/base_sha256"])
    assert sha256(adapters[name]) == str(fixture[f"{name}/adapter_sha256"])
    exact = peft_logits(name, build, IDS, double=True)
    ours, theirs = rel(load(converted, name).logits(IDS), exact), rel(fixture[f"{name}/logits"], exact)
    assert ours <= max(theirs, FLOOR), f"{name}: llamay {ours:.2e}, llama.cpp {theirs:.2e}"


def test_scales_and_two_adapters(converted):
    """A scale multiplies the adapter's term (0.5 against peft at 0.5); two adapters on one base add in
    name order, whichever order they are given in."""
    got = load(converted, "llama-all", 0.5).logits(IDS)
    assert rel(got, peft_logits("llama-all", build, IDS, scale=0.5)) < TIGHT
    bases, adapters = converted
    both = [("llama-all", str(adapters["llama-all"]), 1.0), ("llama-attn", str(adapters["llama-attn"]), 0.7)]
    a = llamay.load(bases["llama"], threads=1, lora=both).logits(IDS)
    b = llamay.load(bases["llama"], threads=2, lora=both[::-1]).logits(IDS)
    assert np.array_equal(a, b)
    alone = llamay.load(bases["llama"], threads=1, lora=both[:1]).logits(IDS)
    assert rel(a, alone) > 1e-3


def test_every_way_of_computing_gives_the_same_bits(converted, tmp_path):
    """With an adapter, with ==: 1 == 2 threads; prefill == token by token; batched == alone; a fork and a
    restored snapshot continue as the continuous context."""
    name, half = "phi3-fused", len(IDS) // 2
    want = load(converted, name).logits(IDS)
    llm = load(converted, name, threads=2)
    assert np.array_equal(llm.logits(IDS), want)
    ctx = llm.create_context(IDS[:1])
    assert np.array_equal(np.stack([ctx.logits] + [ctx.extend([t]) for t in IDS[1:]]), want)
    llm.reset()
    a, b = llm.create_context(IDS[:half]), llm.create_context(IDS[half:][::-1])
    got = llm.scheduler.do(lambda s: s.compute([(a.id, IDS[half:]), (b.id, IDS[:half])], None))
    assert np.array_equal(got[:len(IDS) - half], want[half:])
    c = llm.create_context(IDS[:half])
    assert np.array_equal(c.fork(1)[0].extend(IDS[half:]), want[-1])
    c.save(tmp_path / "c.llamayctx")
    assert np.array_equal(llm.restore_context(tmp_path / "c.llamayctx").extend(IDS[half:]), want[-1])


def test_snapshots_keep_their_adapters(converted, tmp_path):
    """A snapshot records its context's adapters (names, sha256, scales): it restores only where they are
    loaded, and continues under them whatever this model's default scales; one without restores as base."""
    bases, adapters = converted
    half = len(IDS) // 2
    with_a = load(converted, "llama-all")
    want = with_a.logits(IDS)[-1]
    with_a.create_context(IDS[:half]).save(tmp_path / "a.llamayctx")
    for lora in ([], [("llama-attn", str(adapters["llama-attn"]), 1.0)]):
        other = llamay.load(bases["llama"], threads=1, kv="f32", lora=lora)
        with pytest.raises(SnapshotError, match="made with LoRA adapters llama-all"):
            other.restore_context(tmp_path / "a.llamayctx")
    half_scale = llamay.load(bases["llama"], threads=1, kv="f32", lora=[("llama-all", str(adapters["llama-all"]), 0.5)])
    assert np.array_equal(half_scale.restore_context(tmp_path / "a.llamayctx").extend(IDS[half:]), want)
    plain = llamay.load(bases["llama"], threads=1, kv="f32")
    plain.create_context(IDS[:half]).save(tmp_path / "p.llamayctx")
    assert np.array_equal(with_a.restore_context(tmp_path / "p.llamayctx").extend(IDS[half:]), plain.logits(IDS)[-1])


def test_each_request_its_adapters_in_one_batch(converted):
    """With two adapters loaded, contexts under different choices (both, one at another scale, none)
    batched in one forward each get, with ==, the bits of a model loaded with just their choice; the radix
    tree never hands one choice's K/V to another."""
    bases, adapters = converted
    spec = {"llama-all": str(adapters["llama-all"]), "llama-attn": str(adapters["llama-attn"])}
    llm = llamay.load(bases["llama"], threads=2, lora=[(n, p, 1.0) for n, p in spec.items()])
    choices = [None, {"llama-all": 0.5}, [], ["llama-attn"]]
    alone = [llamay.load(bases["llama"], threads=1, lora=lora).logits(IDS) for lora in (
        [(n, p, 1.0) for n, p in spec.items()], [("llama-all", spec["llama-all"], 0.5)], [],
        [("llama-attn", spec["llama-attn"], 1.0)])]
    assert all(rel(a, alone[0]) > 1e-3 for a in alone[1:])
    half = len(IDS) // 2
    ctxs = [llm.create_context(IDS[:half], lora=c) for c in choices]
    assert [c.n_cached for c in ctxs] == [0, 0, 0, 0]  # the same tokens, none cached under another choice
    got = llm.scheduler.do(lambda s: s.compute([(c.id, IDS[half:]) for c in ctxs], None))
    n = len(IDS) - half
    for i, want in enumerate(alone):
        assert np.array_equal(got[i * n:(i + 1) * n], want[half:]), choices[i]
    for c in ctxs:
        c.delete()  # cached under their choices
    again = [llm.create_context(IDS, lora=c) for c in choices]
    assert all(c.n_cached == len(IDS) - 1 for c in again)
    assert all(np.array_equal(c.logits, want[-1]) for c, want in zip(again, alone))
    with pytest.raises(ValueError, match="no LoRA adapter named 'nope'"):
        llm.create_context(IDS, lora=["nope"])


def test_adapters_that_do_not_fit_are_refused(converted, tmp_path):
    bases, adapters = converted
    with pytest.raises(ModelFileError, match="made for architecture 'llama', the model is 'qwen2'"):
        llamay.load(bases["qwen2"], lora=[("x", str(adapters["llama-all"]), 1.0)])
    with pytest.raises(ModelFileError, match="is not a LoRA adapter"):
        llamay.load(bases["llama"], lora=[("x", str(bases["llama"]), 1.0)])

    def drop_b(meta, tensors):
        del tensors["blk.0.attn_q.weight.lora_b"]
    rewrite(adapters["llama-all"], tmp_path / "half.gguf", drop_b)
    with pytest.raises(ModelFileError, match="lora_a without its pair"):
        llamay.load(bases["llama"], lora=[("x", str(tmp_path / "half.gguf"), 1.0)])

    def widen(meta, tensors):
        tensors["blk.0.attn_q.weight.lora_b"] = np.zeros((32, 4), np.float32)
    rewrite(adapters["llama-all"], tmp_path / "wide.gguf", widen)
    with pytest.raises(ModelFileError, match="does not fit"):
        llamay.load(bases["llama"], lora=[("x", str(tmp_path / "wide.gguf"), 1.0)])

    def flat(meta, tensors):
        tensors["blk.0.attn_q.weight.lora_a"] = np.zeros(256, np.float32)
    rewrite(adapters["llama-all"], tmp_path / "flat.gguf", flat)
    with pytest.raises(ModelFileError, match="does not fit"):
        llamay.load(bases["llama"], lora=[("x", str(tmp_path / "flat.gguf"), 1.0)])

    def embd(meta, tensors):
        tensors["token_embd.weight.lora_a"] = np.zeros((4, 64), np.float32)
        tensors["token_embd.weight.lora_b"] = np.zeros((300, 4), np.float32)
    rewrite(adapters["llama-all"], tmp_path / "embd.gguf", embd)
    with pytest.raises(UnsupportedModel, match="adapting token_embd.weight is not supported"):
        llamay.load(bases["llama"], lora=[("x", str(tmp_path / "embd.gguf"), 1.0)])
    with pytest.raises(ValueError, match="two LoRA adapters named alike"):
        llamay.load(bases["llama"], lora=[("x", str(adapters["llama-all"]), 1.0)] * 2)


def test_cli_flag(converted, capsys):
    from llamay.cli.main import main
    from llamay.models.lora import parse_adapter_arg
    assert parse_adapter_arg("a=x.gguf:0.5") == ("a", "x.gguf", 0.5)
    assert parse_adapter_arg("dir/y.gguf") == ("y", "dir/y.gguf", 1.0)
    bases, adapters = converted
    assert main(["run", "-m", str(bases["llama"]), "--lora", f"t={adapters['llama-all']}", "-p", "ab", "-n", "2",
                 "--temp", "0"]) == 0
    with pytest.raises(SystemExit):
        main(["run", "-m", str(bases["llama"]), "--lora", "t=/nope.gguf", "-p", "ab"])
    assert "LoRA adapter not found: /nope.gguf" in capsys.readouterr().err


def test_serve_loads_every_model_with_the_adapters(converted):
    """`serve --lora`: the registry's models carry the adapters (and so snapshots and caches know them)."""
    import asyncio

    from llamay.cli.main import build_parser
    from llamay.server.registry import Registry, Settings
    bases, adapters = converted
    args = build_parser().parse_args(["serve", "-m", str(bases["llama"]), "--lora", f"t={adapters['llama-all']}:0.5"])
    registry = Registry(args.model, Settings(load=LoadOptions(threads=1, lora=tuple(args.lora))), use_store=False)
    loaded = asyncio.run(registry.get(None))
    try:
        assert [(a.name, a.scale) for a in loaded.llm.loras] == [("t", 0.5)]
    finally:
        registry.unload(next(iter(registry.loaded)))


def test_server_chooses_adapters_per_request(converted):
    """`serve --lora`: a request names its adapters after '@' on the OpenAI and Ollama routes (none: every
    adapter at its default scale; '@none': the base), each answered as the Python API answers that choice;
    llama-server's /lora-adapters lists the adapters and sets their default scales."""
    import httpx

    from conftest import LiveServer
    bases, adapters = converted
    spec = [("all", str(adapters["llama-all"]), 1.0), ("attn", str(adapters["llama-attn"]), 0.5)]
    server = LiveServer(["-m", str(bases["llama"]), "--threads", "1", *(a for n, p, s in spec
                                                                        for a in ("--lora", f"{n}={p}:{s}"))])
    try:
        ref = llamay.load(bases["llama"], threads=1, lora=spec)

        def expected(lora):
            return "".join(ref.generate("ab ab", max_tokens=6, temperature=0, lora=lora))

        def openai(model):
            r = httpx.post(server.url + "/v1/completions", json={"model": model, "prompt": "ab ab", "max_tokens": 6,
                                                                 "temperature": 0}, timeout=60)
            return r.status_code, r.json()
        for model, lora in (("llama", None), ("llama@all", ["all"]), ("llama@none", []), ("llama@attn,all", None)):
            code, body = openai(model)
            assert code == 200 and body["choices"][0]["text"] == expected(lora), model
        assert expected(None) != expected([]) != expected(["all"])
        r = httpx.post(server.url + "/api/generate", json={"model": "llama@all", "prompt": "ab ab", "raw": True,
                                                           "stream": False, "options": {"num_predict": 6,
                                                                                        "temperature": 0}}, timeout=60)
        assert r.status_code == 200 and r.json()["response"] == expected(["all"])
        code, body = openai("llama@nope")
        assert code == 404 and "no LoRA adapter named 'nope'" in body["error"]["message"]

        def native(lora):  # llama-server's per-request field: ids as /lora-adapters lists them; left out: off
            return httpx.post(server.url + "/completion", json={"prompt": "ab ab", "n_predict": 6, "temperature": 0,
                                                                "lora": lora}, timeout=60)
        for lora, want in (([{"id": 0, "scale": 1.0}], {"all": 1.0}), ([], []),
                           ([{"id": 1, "scale": 0.5}, {"id": 0, "scale": 0.75}], {"attn": 0.5, "all": 0.75})):
            r = native(lora)
            assert r.status_code == 200 and r.json()["content"] == expected(want), lora
        assert native([{"id": 9, "scale": 1}]).status_code == 400
        assert native([{"id": 0}]).status_code == 400
        listed = httpx.get(server.url + "/lora-adapters").json()
        assert listed == [{"id": 0, "path": spec[0][1], "scale": 1.0}, {"id": 1, "path": spec[1][1], "scale": 0.5}]
        r = httpx.post(server.url + "/lora-adapters", json=[{"id": 0, "scale": 0.25}])
        assert r.status_code == 200 and [a["scale"] for a in r.json()] == [0.25, 0.0]
        assert openai("llama")[1]["choices"][0]["text"] == expected({"all": 0.25})
        assert httpx.post(server.url + "/lora-adapters", json=[{"id": 7, "scale": 1}]).status_code == 400
        server.check_pages()
    finally:
        server.stop()


def test_anthropic_and_chat_routes_choose_adapters_too(converted, tmp_path):
    """The same '@' choice through a chat template: Anthropic's /v1/messages answers as OpenAI's chat
    completions does for each choice, and the choices differ."""
    import httpx

    from conftest import LiveServer
    bases, adapters = converted

    def template(meta, tensors):
        meta["tokenizer.chat_template"] = ("{% for m in messages %}{{ m['content'] }} {% endfor %}", 8, None)
    rewrite(bases["llama"], tmp_path / "chat.gguf", template)
    server = LiveServer(["-m", str(tmp_path / "chat.gguf"), "--threads", "1", "--lora", f"all={adapters['llama-all']}"])
    try:
        texts = {}
        for choice in ("chat@all", "chat@none"):
            messages = [{"role": "user", "content": "ab ab"}]
            a = httpx.post(server.url + "/v1/messages", json={"model": choice, "max_tokens": 6, "temperature": 0,
                                                              "messages": messages}, timeout=60)
            o = httpx.post(server.url + "/v1/chat/completions", json={"model": choice, "max_tokens": 6,
                                                                      "temperature": 0, "messages": messages}, timeout=60)
            assert a.status_code == 200 and o.status_code == 200, (a.text, o.text)
            texts[choice] = a.json()["content"][0]["text"]
            assert texts[choice] == o.json()["choices"][0]["message"]["content"]
        assert texts["chat@all"] != texts["chat@none"]
        r = httpx.post(server.url + "/v1/messages", json={"model": "chat@nope", "max_tokens": 2,
                                                          "messages": [{"role": "user", "content": "x"}]}, timeout=60)
        assert r.status_code == 404 and "no LoRA adapter named 'nope'" in r.text
    finally:
        server.stop()
