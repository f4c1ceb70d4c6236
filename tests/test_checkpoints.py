"""State checkpoints share StatePool slots (engine/checkpoints.py): nothing is copied, the byte budget and a
full pool both give slots back, least recently used first, and a prompt's end keeps its logits (a dense
model's checkpoints are those logits alone); a dense model asked the same prompt again samples at once."""
import numpy as np
import pytest

from llamay.engine.checkpoints import Checkpoints
from llamay.kv.state_pool import OutOfStates, StatePool

TOKENS = list(range(100, 140))


def pool_and_checkpoints(n_slots: int, kept: int):
    pool = StatePool(n_slots, {0: ((4,),), 3: ((2, 3),)})  # 40 bytes a slot
    checkpoints = Checkpoints(kept * pool.bytes_per_slot, pool)
    pool.reclaim = checkpoints.evict
    return pool, checkpoints


def test_a_checkpoint_shares_the_slot_and_copy_on_write_keeps_it():
    pool, cps = pool_and_checkpoints(4, kept=2)
    slot = pool.alloc()
    pool.write(slot, np.arange(10, dtype=np.float32))
    assert not cps.put(0, TOKENS, 10, slot) and cps.put(0, TOKENS, 10, slot)  # the second: held already
    assert pool.n_free == 3  # shared, not copied
    mine = pool.writable(slot)  # the context computes on: its own copy, the checkpoint's slot untouched
    pool.write(mine, np.zeros(10, np.float32))
    n, held = cps.find(0, TOKENS, 39)
    assert (n, held) == (10, slot) and np.array_equal(pool.read(held), np.arange(10, dtype=np.float32))
    assert cps.find(0, TOKENS, 9) == (0, None) and cps.find(1, TOKENS, 39) == (0, None)  # below it; other adapters
    pool.check({mine: 1, **cps.held()})


def test_the_budget_drops_the_least_recently_used():
    pool, cps = pool_and_checkpoints(8, kept=2)
    for n in (5, 10, 15):
        slot = pool.alloc()
        cps.put(0, TOKENS, n, slot)
        pool.release(slot)  # the context is gone: the checkpoint alone holds it
    assert len(cps) == 2 and cps.find(0, TOKENS, 39)[0] == 15 and cps.find(0, TOKENS, 7) == (0, None)
    assert pool.n_free == 6 and cps.bytes == 2 * pool.bytes_per_slot


def test_a_full_pool_takes_slots_back_from_checkpoints_before_it_refuses():
    pool, cps = pool_and_checkpoints(2, kept=8)
    for n in (5, 10):
        slot = pool.alloc()
        cps.put(0, TOKENS, n, slot)
        pool.release(slot)
    assert pool.n_free == 0
    cps.find(0, TOKENS, 5)  # used last: kept longest
    pool.alloc()
    assert len(cps) == 1 and cps.find(0, TOKENS, 39)[0] == 5
    pool.alloc()
    assert len(cps) == 0
    with pytest.raises(OutOfStates):
        pool.alloc()


def test_a_prompts_end_keeps_its_logits_with_the_state():
    pool, cps = pool_and_checkpoints(4, kept=3)
    slot = pool.alloc()
    cps.put(0, TOKENS, 20, slot)
    assert cps.whole(0, TOKENS[:20]) is None  # a state without logits: not a prompt's end
    logits = np.arange(6, dtype=np.float32)
    cps.put(0, TOKENS, 20, slot, logits)  # the same checkpoint, a copy of its logits added
    logits[:] = -1  # the caller's array is its own
    held, kept = cps.whole(0, TOKENS[:20])
    assert held == slot and np.array_equal(kept, np.arange(6, dtype=np.float32))
    assert cps.whole(0, TOKENS[:21]) is None and cps.whole(1, TOKENS[:20]) is None
    assert cps.bytes == pool.bytes_per_slot + logits.nbytes
    cps.put(0, TOKENS, 20, slot, np.zeros(6, np.float32))  # held with logits already: kept as they were
    assert np.array_equal(cps.whole(0, TOKENS[:20])[1], np.arange(6, dtype=np.float32))
    cps.evict()
    assert cps.bytes == 0 and cps.whole(0, TOKENS[:20]) is None and pool.n_free == 3


def test_without_a_pool_a_checkpoint_is_a_prompts_logits():
    cps = Checkpoints(2 * 24)  # two prompts' logits of 6 floats
    assert not cps.put(0, TOKENS, 20, None) and not len(cps)  # nothing to keep without logits
    logits = np.arange(6, dtype=np.float32)
    assert not cps.put(0, TOKENS, 20, None, logits) and cps.put(0, TOKENS, 20, None, logits)
    held, kept = cps.whole(0, TOKENS[:20])
    assert held is None and np.array_equal(kept, logits) and cps.held() == {}
    cps.put(0, TOKENS, 30, None, logits + 1)
    cps.put(0, TOKENS, 40, None, logits + 2)  # over the budget: the least recently used goes
    assert cps.whole(0, TOKENS[:20]) is None and cps.bytes == 2 * logits.nbytes
    assert np.array_equal(cps.whole(0, TOKENS[:40])[1], logits + 2)


def test_a_dense_model_asked_a_prompt_again_computes_nothing_before_its_first_token(tiny_pair):
    """The logits at a prompt's end are kept: the same prompt again (a regenerate) opens whole, computing
    no token of it (one token fewer than with those logits dropped, which recomputes the prompt's last), and
    gives the same answer, the same as a model that never saw the prompt."""
    import llamay
    llm = llamay.load(tiny_pair[0], threads=1)
    prompt = list(range(5, 45))
    first = list(llm.generate(prompt, max_tokens=6, temperature=0))
    store = llm.context_store

    def again() -> tuple[list, int, int]:
        before = store.n_prefilled
        out = list(llm.generate(prompt, max_tokens=6, temperature=0))
        return out, llm.stats.cached_tokens, store.n_prefilled - before
    kept = again()
    while store.checkpoints.evict():
        pass
    dropped = again()
    assert kept[0] == dropped[0] == first
    assert kept[1] == len(prompt) and dropped[1] == len(prompt) - 1 and kept[2] == dropped[2] - 1
    ctx = llm.create_context(prompt)
    fresh = llamay.load(tiny_pair[0], threads=1)
    assert ctx.n_cached == len(prompt) and np.array_equal(ctx.logits, fresh.logits(prompt)[-1])
    assert list(fresh.generate(prompt, max_tokens=6, temperature=0)) == first


def test_prefaulting_slots_keeps_their_bytes():
    pool, _ = pool_and_checkpoints(4, kept=2)
    slot = pool.alloc()
    pool.write(slot, np.arange(10, dtype=np.float32))
    done = pool.prefault(3)
    assert isinstance(done, bool) and np.array_equal(pool.read(slot), np.arange(10, dtype=np.float32))
    assert not pool.read(1).any()
