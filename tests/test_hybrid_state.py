"""Hybrid models (recurrent mixers beside attention) on tiny files written by llama.cpp's converter: logits
against float32 transformers and as close to float64 as llama.cpp's, and the state engine's equalities with
==: every way of computing a context (prefill, token by token, batched, 1 or 2 threads, forked, cut back and
recomputed, resumed from a prefix-cache checkpoint) gives the same bits, and a fork allocates no state
until a branch runs."""
import threading

import numpy as np
import pytest
import torch

import hybrid_deltanet
import hybrid_kda
import hybrid_mamba
import hybrid_mamba2
import hybrid_shortconv
import llamay
from arch_models import build, check_every_way, convert, float64_logits, hf_logits, sha256, token_ids
from conftest import CACHE, ROOT
from llamay.cli.main import main
from llamay.cli.store_cmds import human_bytes
from llamay.engine.context_store import ContextStore
from llamay.kv.snapshot_format import SnapshotError, read_snapshot, write_snapshot
from llamay.models.describe import state_bytes

FAMILIES = {"hybrid_shortconv": hybrid_shortconv.CASES, "hybrid_mamba": hybrid_mamba.CASES,
            "hybrid_mamba2": hybrid_mamba2.CASES, "hybrid_deltanet": hybrid_deltanet.CASES, "hybrid_kda": hybrid_kda.CASES}
CASES = {name: case for cases in FAMILIES.values() for name, case in cases.items()}
MODULE = {name: module for module, cases in FAMILIES.items() for name in cases}
GAPS = hybrid_deltanet.GAPS  # case -> where llamay is further from float64 than llama.cpp (strict xfails)
TIGHT, FLOOR = 1e-3, 2e-6  # as tests/test_arch_transformers.py; below the larger of FLOOR and float32
# transformers' own distance from float64 (6e-6 on granitehybrid-moe), nearer or further than llama.cpp is noise
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    models = {name: (case, build(case)) for name, case in CASES.items()}
    return convert(models, tmp_path_factory.mktemp("hybrid-converted"), CACHE)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, files):
    name = request.param
    model = build(CASES[name])
    ids = token_ids(model.config.vocab_size, CASES[name].n_tokens)
    llm = llamay.load(files[name], threads=1, n_ctx=CASES[name].n_ctx)
    return name, model, ids, files[name], llm, llm.logits(ids)


def rel(got, ref) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def test_logits_match_transformers_f32(case):
    name, model, ids, path, _, _ = case
    got = llamay.load(path, threads=1, kv="f32", n_ctx=CASES[name].n_ctx).logits(ids)
    want = hf_logits(model, ids)
    assert rel(got, want) < TIGHT, f"{name}: {rel(got, want):.2e}"
    assert (got.argmax(1) == want.argmax(1)).all(), name


def test_no_further_from_float64_than_llamacpp(case, request):
    name, model, ids, path, _, _ = case
    if name in GAPS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=GAPS[name]))
    fixture = np.load(ROOT / "tests" / "fixtures" / f"llamacpp_{MODULE[name]}.npz")
    assert sha256(path) == str(fixture[f"{name}/sha256"]), f"{name}: rerun scripts/llamacpp_arch_logits.py"
    exact = float64_logits(model, ids)
    ours = llamay.load(path, threads=1, kv="f32", n_ctx=CASES[name].n_ctx).logits(ids)
    d_ours, d_llamacpp = rel(ours, exact), rel(fixture[f"{name}/f32kv"], exact)
    noise = max(FLOOR, rel(hf_logits(model, ids), exact))
    assert d_ours <= max(d_llamacpp, noise), f"{name}: llamay {d_ours:.2e}, llama.cpp {d_llamacpp:.2e}, noise {noise:.2e}"


def test_every_way_of_computing_gives_the_same_bits(case):
    name, _, ids, path, _, want = case
    llm = llamay.load(path, threads=2, n_ctx=CASES[name].n_ctx)
    check_every_way(llm, ids, want, name)


def test_fork_shares_the_state_until_a_branch_runs(case):
    name, _, ids, _, llm, want = case
    llm.reset()
    half = len(ids) // 2
    parent = llm.create_context(ids[:half])
    states = llm.context_store.states
    free = states.n_free
    kids = parent.fork(3)
    assert states.n_free == free  # three branches, no state allocated
    assert np.array_equal(kids[0].extend(ids[half:]), want[-1]), name
    assert states.n_free == free - 1  # the branch that ran got its own copy
    other = kids[1].extend(ids[half:][::-1])  # another branch diverges from the same state
    assert np.array_equal(parent.extend(ids[half:]), want[-1]), name  # the parent's state was not touched
    assert not np.array_equal(other, want[-1])
    llm.scheduler.do(lambda store: store.check())


def test_reset_keeps_the_state_slots_and_the_built_graphs(case):
    """A reset forgets every context but keeps the slot arrays, so the graphs built over them are reused (a
    new StatePool each reset built a new graph for every prompt: the hybrid prefill benchmark's runs were
    slowed by page faults) and a held slot is free again."""
    name, _, ids, _, llm, want = case
    llm.reset()
    states = llm.context_store.states
    llm.create_context(ids)
    plans = len(llm.decoder._plans)
    llm.reset()
    assert llm.context_store.states is states and states.n_free == states.n_slots
    assert np.array_equal(llm.create_context(ids).logits, want[-1]), name
    assert len(llm.decoder._plans) == plans


def test_a_branch_point_is_a_checkpoint(case):
    """The parent goes on past its fork and is freed: a prompt that shares the prefix up to the fork and
    then differs resumes at the fork, to the same bits."""
    name, _, ids, _, llm, _ = case
    llm.reset()
    half = len(ids) // 2
    parent = llm.create_context(ids[:half])
    kid = parent.fork(1)[0]
    parent.extend(ids[half:])
    parent.delete()
    kid.delete(cache=False)
    other = ids[:half] + ids[half:][::-1]
    ctx = llm.create_context(other)
    assert ctx.n_cached == half
    assert np.array_equal(ctx.logits, llm.logits(other)[-1]), name


def test_an_edited_last_message_resumes_at_its_start(case):
    """The state is checkpointed where each of a prompt's last messages starts (a turn marker, a control
    token): a prompt that keeps the messages before it and changes the last one resumes at its marker,
    prefilling only that message, to the same bits. Without the marker checkpoint it resumes at 0."""
    name, _, ids, _, llm, _ = case
    llm.reset()
    tok = llm.tokenizer
    mark = next(t for t in range(tok.n_vocab) if tok.is_control(t))
    plain = [t for t in ids if not tok.is_control(t)]
    at = len(plain) * 2 // 3
    llm.create_context(plain[:at] + [mark] + plain[at:]).delete()
    edited = plain[:at] + [mark] + plain[at:at + 2] + plain[at + 2:][::-1]
    store = llm.context_store
    before = store.n_prefilled
    ctx = llm.create_context(edited)
    assert ctx.n_cached == at and store.n_prefilled - before == len(edited) - at, name
    assert np.array_equal(ctx.logits, llm.logits(edited)[-1]), name
    llm.reset()  # a generation's prompt (the scheduler's chunks) is checkpointed there too
    store = llm.context_store
    list(llm.generate(plain[:at] + [mark] + plain[at:], max_tokens=1, temperature=0))
    before = store.n_prefilled
    list(llm.generate(edited, max_tokens=1, temperature=0))
    stats = llm.stats
    assert stats.cached_tokens == at and store.n_prefilled - before == len(edited) - at, name
    assert stats.token_ids == [int(np.argmax(llm.logits(edited)[-1]))], name


def test_a_full_state_pool_takes_slots_back_from_checkpoints(case):
    """Checkpoints share slots: with two slots, two freed contexts' checkpoints hold both, and a third
    context takes one back (the least recently used checkpoint goes) instead of failing; its logits are
    the same bits."""
    name, _, ids, _, llm, _ = case
    store = ContextStore(llm.decoder, llm.context_store.view().n_total, llm.page_size, llm.kv,
                         states=llm.decoder.new_states(2))
    for prompt in (ids[:20], ids[::-1][:20]):
        ctx, _ = store.create(prompt)
        store.free(ctx)
    assert store.states.n_free == 0 and len(store.checkpoints) == 2
    third = ids[5:40]
    ctx, _ = store.create(third)
    assert len(store.checkpoints) == 1
    assert np.array_equal(store.extend(ctx, []), llm.logits(third)[-1]), name
    store.check()


def test_a_message_just_after_the_resume_point_ends_no_pass(case):
    """A new turn's prompt resumes at the last answer's checkpoint, and its message starts a few tokens
    later: no pass ends there (one pass, not two; no checkpoint), and an edit of that message resumes at the
    answer's checkpoint, recomputing those few tokens, to the same bits."""
    name, _, ids, _, llm, _ = case
    llm.reset()
    tok, store = llm.tokenizer, llm.context_store
    mark = next(t for t in range(tok.n_vocab) if tok.is_control(t))
    plain = [t for t in ids if not tok.is_control(t)]
    at = len(plain) // 2
    first = plain[:at]
    list(llm.generate(first, max_tokens=1, temperature=0))
    turn = first + plain[at:at + 2] + [mark] + plain[at + 2:]
    list(llm.generate(turn, max_tokens=1, temperature=0))
    assert llm.stats.cached_tokens == at
    assert store.checkpoints.find(0, turn, at + 2)[0] == at  # none where the message starts
    edited = first + plain[at:at + 2] + [mark] + plain[at + 2:][::-1]
    before = store.n_prefilled
    list(llm.generate(edited, max_tokens=1, temperature=0))
    assert llm.stats.cached_tokens == at and store.n_prefilled - before == len(edited) - at, name
    assert llm.stats.token_ids == [int(np.argmax(llm.logits(edited)[-1]))], name


def test_a_cut_back_context_recomputes_to_the_same_bits(case):
    name, _, ids, _, llm, want = case
    llm.reset()
    ctx = llm.create_context(ids)
    n = len(ids) - 30

    def cut(store):
        store.truncate(ctx.id, n)
        return store.tokens(ctx.id)
    assert llm.scheduler.do(cut) == ids[:n]
    assert np.array_equal(ctx.extend(ids[n:]), want[-1]), name
    llm.scheduler.do(lambda store: store.check())


def test_the_prefix_cache_resumes_from_a_state_checkpoint(case):
    """A freed context leaves a checkpoint at its end: a longer prompt over the same prefix prefills only
    the rest, to the same bits; a prompt that branches earlier finds no checkpoint below the branch and
    recomputes from the start, also to the same bits."""
    name, _, ids, _, llm, want = case
    llm.reset()
    half = len(ids) // 2
    llm.create_context(ids[:half]).delete()
    store = llm.context_store
    before = store.n_prefilled
    ctx = llm.create_context(ids)
    assert ctx.n_cached == half and store.n_prefilled - before == len(ids) - half
    assert np.array_equal(ctx.logits, want[-1]), name
    branch = ids[:10] + ids[10:][::-1]
    other = llm.create_context(branch)
    assert other.n_cached == 0
    assert np.array_equal(other.logits, llm.logits(branch)[-1]), name
    llm.scheduler.do(lambda store: store.check())


def test_a_regenerated_answer_computes_nothing_before_its_first_token(case):
    """A prompt's state is checkpointed at its end with the logits there: generating again from the same
    prompt computes no prompt token (only the 11 sampled ones after the first), and the answer is the same
    text. The checkpoints share slots, nothing copied: no slot is held once the contexts are gone but
    theirs."""
    name, _, ids, _, llm, _ = case
    llm.reset()
    store = llm.context_store
    first = "".join(llm.generate(ids, max_tokens=12, temperature=0))
    before = store.n_prefilled
    again = "".join(llm.generate(ids, max_tokens=12, temperature=0))
    assert first == again and first, name
    assert llm.stats.cached_tokens == len(ids)
    assert store.n_prefilled - before == 11
    held = store.checkpoints.held()
    assert store.states.n_free == store.states.n_slots - len(held)
    llm.scheduler.do(lambda store: store.check())


def test_a_restored_snapshot_continues_to_the_same_bits(case, tmp_path):
    """The snapshot carries the recurrent state (format version 4): restored, even on another load of
    the file, the context continues as the uncut one; a snapshot without a state does not restore here."""
    name, _, ids, path, llm, want = case
    half = len(ids) // 2
    ctx = llm.create_context(ids[:half])
    ctx.save(tmp_path / "h.llamayctx")
    assert read_snapshot(tmp_path / "h.llamayctx").state.size * 4 == llm.context_store.states.bytes_per_slot
    other = llamay.load(path, threads=2, n_ctx=CASES[name].n_ctx)
    assert np.array_equal(other.restore_context(tmp_path / "h.llamayctx").extend(ids[half:]), want[-1]), name
    assert np.array_equal(ctx.extend(ids[half:]), want[-1]), name
    snap = read_snapshot(tmp_path / "h.llamayctx")
    with pytest.raises(SnapshotError, match="holds no recurrent state|n_layer = 0"):  # no K/V layer (mamba2): not even written
        write_snapshot(tmp_path / "stateless.llamayctx", snap.header, snap.layers_k, snap.layers_v, snap.logits)
        other.restore_context(tmp_path / "stateless.llamayctx")
    other.scheduler.do(lambda store: store.check())


def test_show_prints_the_state_a_context_and_a_checkpoint_take(case, capsys):
    name, _, _, path, llm, _ = case
    assert state_bytes(llm.spec) == llm.context_store.states.bytes_per_slot > 0
    assert main(["show", "--arch", str(path)]) == 0
    kib = llm.context_store.states.bytes_per_slot / 1024
    assert f"recurrent state: {kib:.1f} KiB per context and per checkpoint" in capsys.readouterr().out, name
    assert main(["show", str(path)]) == 0  # the plain show has it too, in Ollama's decimal units
    want = human_bytes(llm.context_store.states.bytes_per_slot)
    assert f"recurrent state     {want} per context and per checkpoint" in capsys.readouterr().out, name


def test_a_restarted_model_resumes_from_a_state_record_on_disk(case, tmp_path):
    """The disk tier keeps the state records beside the pages: another load of the file (a restarted
    server) resumes a longer prompt at the first one's end, reading its pages and state instead of
    computing them, to the same bits."""
    name, _, ids, path, _, want = case
    half = len(ids) // 2 + 5  # not on a page boundary: the record carries the partial page
    first = llamay.load(path, threads=1, n_ctx=CASES[name].n_ctx, cache_disk=1 << 24, cache_dir=str(tmp_path))
    first.create_context(ids[:half]).delete()
    first.cache.flush()

    def written(store):  # the writer read the record in place, in a slot it shared: given back now
        store.unpin_written()
        store.states.check(store.checkpoints.held())  # no context is left: the checkpoints alone hold slots
    first.scheduler.do(written)
    again = llamay.load(path, threads=1, n_ctx=CASES[name].n_ctx, cache_disk=1 << 24, cache_dir=str(tmp_path))
    store = again.context_store
    ctx = again.create_context(ids)
    assert ctx.n_cached == half and store.n_prefilled == len(ids) - half
    assert store.tier_tokens["disk"] == half
    assert np.array_equal(ctx.logits, want[-1]), name
    again.scheduler.do(lambda store: store.check())


def test_a_second_server_resumes_from_a_state_record_in_redis(case, redis_url):
    """Through a shared Redis, without any disk: a second model process finds the record another one wrote."""
    name, _, ids, path, _, want = case
    url, client, _ = redis_url
    client.flushall()
    half = len(ids) // 2 + 7
    first = llamay.load(path, threads=1, n_ctx=CASES[name].n_ctx, cache_redis=url)
    first.create_context(ids[:half]).delete()
    first.cache.flush()
    second = llamay.load(path, threads=1, n_ctx=CASES[name].n_ctx, cache_redis=url)
    ctx = second.create_context(ids)
    assert ctx.n_cached == half and second.context_store.n_prefilled == len(ids) - half
    assert np.array_equal(ctx.logits, want[-1]), name


def test_speculation_rolls_a_rejected_draft_back_and_changes_no_token(case):
    """Drafts from the radix tree that the sampled tokens leave part way (the greedy answer with one token
    changed, cached beside the prompt) are cut: the state goes back to before the pass and the accepted
    tokens are computed again, so the output is the one without speculation."""
    name, _, ids, _, llm, _ = case
    llm.reset()
    prompt = ids[:40]
    ctx = llm.create_context(prompt)
    no_end = {t: float("-inf") for t in llm.tokenizer.eog_ids}  # 40 tokens: a random model may end sooner
    greedy = "".join(ctx.generate(max_tokens=40, temperature=0, spec="none", logit_bias=no_end))
    answer = ctx.tokens[len(prompt):]
    ctx.delete(cache=False)
    llm.create_context(prompt + answer[:5] + [(answer[5] + 1) % llm.n_vocab] + answer[6:]).delete()
    s = llm.scheduler
    before = (s.drafted_tokens, s.accepted_tokens)
    assert "".join(llm.generate(prompt, max_tokens=40, temperature=0, spec="tree", logit_bias=no_end)) == greedy, name
    drafted, accepted = s.drafted_tokens - before[0], s.accepted_tokens - before[1]
    assert drafted > accepted >= 4  # the draft was cut after the tokens it shares with the answer
    llm.scheduler.do(lambda store: store.check())


def test_state_record_keys_hashed_in_one_pass_equal_each_prefix_alone():
    """find_state keys every candidate prefix in one pass over the tokens: the same keys as hashing each
    prefix alone, so a record written under one key is found under the other."""
    from llamay.engine.cache_tiers import CacheTiers
    tiers = CacheTiers({}, lambda lora: b"root" + repr(lora).encode(), 32, 64)
    tokens = list(range(100, 400))
    ns = [1, 31, 32, 33, 200, 300]
    assert tiers.state_keys((), tokens, ns) == [tiers.state_keys((), tokens, [n])[0] for n in ns]
    assert len(set(tiers.state_keys((), tokens, ns))) == len(ns)
    assert tiers.state_keys((("a", 1.0),), tokens, [5]) != tiers.state_keys((), tokens, [5])
    tiers.close()


def test_a_loaded_hybrid_faults_its_state_slots_in_beside_the_requests(files, monkeypatch):
    """Without a cache tier too, a loaded hybrid prefaults the slots its first contexts and checkpoints take:
    the first SLOTS_AT_LOAD before load returns, the rest on a thread of its own (a fresh slot's first copy
    faulted it in on a request's path)."""
    from llamay.engine.llm import SLOTS_AT_LOAD
    from llamay.kv.state_pool import StatePool
    from llamay.settings import LOAD, SCHEDULER
    asked, done = [], threading.Event()

    def prefault(self, n, wait=None, first=0):
        asked.append((self, n, first))
        if len(asked) == 2:
            done.set()
    monkeypatch.setattr(StatePool, "prefault", prefault)
    name = next(iter(CASES))
    llm = llamay.load(files[name], threads=1, n_ctx=CASES[name].n_ctx)
    states, n = llm.context_store.states, llm.context_store.states.n_slots - LOAD.state_slots + SCHEDULER.concurrency
    assert asked[:1] == [(states, SLOTS_AT_LOAD, 0)] and done.wait(30)
    assert asked[1] == (states, n, SLOTS_AT_LOAD) and n > SLOTS_AT_LOAD


def test_jambas_expert_layers_are_those_whose_tensors_have_a_router(files):
    """No key says which Jamba layers hold experts: llama.cpp's rule, the tensors (a router, ffn_gate_inp); the
    published every-second-layer pattern where the tensors are not at hand."""
    from llamay.gguf import GGUFReader
    from llamay.models.spec import arch_spec
    reader = GGUFReader(files["jamba"])
    routed = (False, True, False, True, False, True)  # the case's expert_layer_offset 1, period 2
    assert arch_spec(reader.metadata, reader.tensors).moe.layers == routed == arch_spec(reader.metadata).moe.layers
    fewer = {k: v for k, v in reader.tensors.items() if not k.startswith("blk.3.ffn_gate_inp")}
    assert arch_spec(reader.metadata, fewer).moe.layers == (False, True, False, False, False, True)


def test_a_one_group_norm_written_without_its_trailing_1_gives_the_same_bits(files, tmp_path):
    """A one-group Mamba2's gated norm is [d_inner, 1]; llama-quantize writes it as [d_inner] (ggml leaves
    trailing 1s out): such a file loads, to the same bits (it was refused: "expected [128, 1]")."""
    from arch_models import rewrite
    from llamay.gguf import GGUFReader
    name = "mamba2-1group"

    def squeeze(meta, tensors):
        norms = [k for k in tensors if k.endswith("ssm_norm.weight")]
        assert norms and all(tensors[k].shape == (1, 128) for k in norms)
        for k in norms:
            tensors[k] = tensors[k].reshape(-1)
    rewrite(files[name], tmp_path / "squeezed.gguf", squeeze)
    assert GGUFReader(tmp_path / "squeezed.gguf").tensors["blk.0.ssm_norm.weight"].shape == (128,)
    ids = token_ids(CASES[name].extra["vocab_size"], CASES[name].n_tokens)
    want = llamay.load(files[name], threads=1, n_ctx=CASES[name].n_ctx).logits(ids)
    got = llamay.load(tmp_path / "squeezed.gguf", threads=1, n_ctx=CASES[name].n_ctx).logits(ids)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ["mamba", "mamba2"])
def test_a_model_without_attention_wider_than_a_rope_head_is_taken(files, name):
    """No layer attends, so no RoPE size may refuse it: Mamba-1.4B (n_embd 2048) was refused as a head of
    2048 dims rotated whole, past MAX_ROPE_DIMS."""
    from llamay.gguf import GGUFReader
    from llamay.models.spec import MAX_ROPE_DIMS, arch_spec
    meta = dict(GGUFReader(files[name]).metadata)
    meta[f"{name}.embedding_length"] = 2 * MAX_ROPE_DIMS
    assert arch_spec(meta).n_embd == 2 * MAX_ROPE_DIMS
