"""The state engine end to end on the default model: forks, prefix hits and restored snapshots continue
with logits equal (==) to a fresh prefill, with 1 and 2 threads; zero-copy forks; per-turn prefill."""
import shutil

import numpy as np
import pytest

import llamay
from llamay.engine.llm import LLM
from llamay.kv.snapshot_format import SnapshotError

pytestmark = pytest.mark.model
TEXT = "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. 1, 2, 3, 4"


@pytest.fixture(scope="module", params=[1, 2], ids=["1thread", "2threads"])
def llm(request, smollm_path):
    return LLM(smollm_path, threads=request.param, n_ctx=512, page_size=4)


@pytest.fixture
def ids(llm):
    llm.reset()
    return llm.tokenize(TEXT)


def test_fork_continues_exactly_like_fresh_prefill(llm, ids):
    cold = llm.logits(ids)[-1]
    llm.reset()
    base = llm.create_context(ids[:10])
    kids = base.fork(4)
    for kid in kids:
        assert np.array_equal(kid.extend(ids[10:]), cold)
    assert np.array_equal(base.extend(ids[10:]), cold)  # the base, written after its forks, too


def test_fork_of_32_pages_eight_ways_allocates_nothing(llm):
    llm.reset()
    base = llm.create_context(list(range(200, 200 + 32 * 4)))  # 128 tokens = 32 pages of 4
    assert base.n_pages == 32
    stats = llm.kv_view().stats
    before = stats.pages_allocated
    kids = base.fork(8)
    assert stats.pages_allocated == before and all(k.n_pages == 32 for k in kids)
    kids[0].extend([5])  # 128 tokens fill 32 pages: the 129th needs one fresh page, no clone
    assert stats.pages_allocated == before + 1


def test_prefix_hit_equals_cold_and_counts(llm, ids):
    cold = llm.logits(ids)[-1]
    llm.reset()
    llm.eval_last(ids[:13])
    assert np.array_equal(llm.eval_last(ids), cold)
    assert llm.stats.cached_tokens == 13


def test_restored_snapshot_continues_like_the_original(llm, ids, tmp_path):
    base = llm.create_context(ids[:11])
    base.save(tmp_path / "base.llamayctx")
    want = "".join(base.generate(max_tokens=8, temperature=0))
    want_ids = list(llm.stats.token_ids)
    restored = llm.restore_context(tmp_path / "base.llamayctx")
    assert restored.tokens == ids[:11]
    got = "".join(restored.generate(max_tokens=8, temperature=0))
    assert got == want and llm.stats.token_ids == want_ids
    other = llm.restore_context(tmp_path / "base.llamayctx")
    assert np.array_equal(other.extend(ids[11:]), llm.logits(ids)[-1])


def test_snapshot_under_other_weights_is_refused_with_both_digests(llm, ids, tmp_path, smollm_path):
    llm.create_context(ids[:6]).save(tmp_path / "a.llamayctx")
    changed = tmp_path / "changed.gguf"
    shutil.copy(smollm_path, changed)
    with open(changed, "ab") as f:
        f.write(b"\0")  # same tensors, other file: another sha256
    other = llamay.load(changed, threads=1, n_ctx=64)
    with pytest.raises(SnapshotError) as e:
        other.restore_context(tmp_path / "a.llamayctx")
    from llamay.engine.digest import weights_digest
    assert weights_digest(str(smollm_path)) in str(e.value) and weights_digest(str(changed)) in str(e.value)
    assert other.kv_view().n_free == other.kv_view().n_total  # nothing left allocated


def test_ten_turn_conversation_prefills_only_each_new_turn(llm):
    llm.reset()
    history, prefilled = [], []
    rng = np.random.default_rng(0)
    for turn in range(10):
        user = rng.integers(300, 40000, size=5 + turn).tolist()
        history += user
        before = llm.context_store.n_prefilled
        out = list(llm.generate(history, max_tokens=3, temperature=0))
        st = llm.stats  # decode passes computed generated - 1 tokens plus the draft tokens not kept
        decoded = st.generated_tokens - 1 + st.drafted_tokens - st.accepted_tokens
        prefilled.append(llm.context_store.n_prefilled - before - decoded)
        history += llm.stats.token_ids
        assert out is not None
        if turn:  # the new user tokens plus the previous turn's last (sampled, never computed) token
            assert prefilled[-1] == len(user) + 1, (turn, prefilled)
    assert prefilled[0] == 5


def test_kv_budget_evicts_cached_prefixes_not_contexts_in_use(smollm_path):
    from llamay.kv import page_bytes
    from llamay.kv.allocator import OutOfPages
    probe = LLM(smollm_path, threads=2, n_ctx=64, page_size=4)
    want = probe.logits(list(range(300, 340)) + [7])[-1]
    one = page_bytes(probe.spec.kv_dims, 4, probe.context_store.pool.kv)
    llm = LLM(smollm_path, threads=2, n_ctx=64, page_size=4, kv_budget=20 * one)  # 20 pages = 80 slots
    assert llm.kv_view().n_total == 20
    kept = llm.create_context(list(range(300, 340)))  # 10 pages, in use
    for start in (1000, 2000, 3000):  # 10 pages each, cached when done: older ones must be evicted
        list(llm.generate(list(range(start, start + 39)), max_tokens=1, temperature=0))
    assert llm.kv_view().stats.evictions > 0
    assert np.array_equal(kept.extend([7]), want)
    with pytest.raises(OutOfPages):
        llm.create_context(list(range(400, 463)))  # 16 pages while 11 are held by `kept`


def test_contexts_are_listed_until_deleted(llm, ids):
    a = llm.create_context(ids[:5])
    b, = a.fork(1)
    assert {c.id for c in llm.contexts()} >= {a.id, b.id}
    b.delete()
    assert b.id not in {c.id for c in llm.contexts()} and a.id in {c.id for c in llm.contexts()}
