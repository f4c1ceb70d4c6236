"""The prefix cache's disk tier in the engine (engine/cache_tiers.py): a prompt computed by one process is
read back from disk by the next instead of prefilled, with the same logits (==) and the same tokens; other
weights never read it; a corrupted page is computed again; pins hold pages only until written; reading is
skipped where computing is faster; and the CLI's `cache ls|du|clear`."""

import numpy as np
import pytest

import llamay
from llamay.cli.main import main
from llamay.kv.disk import SUFFIX


MB = 1 << 20




def load(path, folder, **kw):
    return llamay.load(path, threads=2, n_ctx=512, cache_disk=64 * MB, cache_dir=folder, **kw)


def prompt(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(10, 250, n).tolist()


def test_a_new_process_reads_the_prefix_from_disk_with_the_same_logits(tiny_pair, tmp_path):
    ids = prompt(200)
    first = load(tiny_pair[0], tmp_path)
    want = first.eval_last(ids)
    assert first.stats.cached_tokens == 0
    first.cache.flush()
    assert first.cache.pages_written["disk"] == 200 // 32
    second = load(tiny_pair[0], tmp_path)  # a restart: nothing in memory
    got = second.eval_last(ids)
    assert second.stats.cached_tokens == second.stats.disk_tokens == 192  # six full pages; the rest computed
    assert np.array_equal(got, want)
    plain = llamay.load(tiny_pair[0], threads=2, n_ctx=512)  # no disk tier at all
    assert np.array_equal(plain.eval_last(ids), want)
    gen = lambda llm: (list(llm.generate(ids + [7], max_tokens=24, temperature=0)), llm.stats)
    (_, stats), (_, plain_stats) = gen(second), gen(plain)
    assert stats.token_ids == plain_stats.token_ids and stats.disk_tokens == 0  # memory has it now
    third = load(tiny_pair[0], tmp_path)
    _, stats = gen(third)
    assert stats.token_ids == plain_stats.token_ids and stats.disk_tokens == 192
    for llm in (first, second, third):
        llm.context_store.check()


def test_other_weights_never_read_it(tiny_pair, tmp_path):
    ids = prompt(100)
    a = load(tiny_pair[0], tmp_path)
    a.eval_last(ids)
    a.cache.flush()
    b = load(tiny_pair[1], tmp_path)  # the same folder, another file
    b.eval_last(ids)
    assert b.stats.cached_tokens == 0 and b.stats.disk_tokens == 0
    assert a.cache.root_of(()) != b.cache.root_of(())


def test_pages_of_other_kernels_numerics_are_never_read(tiny_pair, tmp_path, monkeypatch):
    """KV_NUMERICS is in every key: a tier written by kernels whose bits differ (an earlier version) is never
    matched, so a resumed context never continues to other bits than computing it gives."""
    from llamay.engine import cache_tiers
    ids = prompt(100)
    a = load(tiny_pair[0], tmp_path)
    a.eval_last(ids)
    a.cache.flush()
    monkeypatch.setattr(cache_tiers, "KV_NUMERICS", cache_tiers.KV_NUMERICS + "-other")
    b = load(tiny_pair[0], tmp_path)  # the same file and folder, other numerics
    b.eval_last(ids)
    assert b.stats.cached_tokens == 0 and b.stats.disk_tokens == 0
    monkeypatch.undo()
    c = load(tiny_pair[0], tmp_path)  # the writer's numerics again: read
    c.eval_last(ids)
    assert c.stats.disk_tokens == 96


def test_a_page_corrupted_on_disk_is_computed_again(tiny_pair, tmp_path):
    ids = prompt(161, seed=3)  # five full pages before the last token
    a = load(tiny_pair[0], tmp_path)
    want = a.eval_last(ids)
    a.cache.flush()
    seg = next(tmp_path.rglob("*" + SUFFIX))
    raw = bytearray(seg.read_bytes())
    raw[-100] ^= 0x55  # inside the last page of the segment
    seg.write_bytes(bytes(raw))
    b = load(tiny_pair[0], tmp_path)
    got = b.eval_last(ids)
    assert np.array_equal(got, want) and b.stats.disk_tokens == 4 * 32  # pages 0..3 verified, page 4 computed
    assert b.cache.disk.dropped == 1
    b.context_store.check()


def test_pages_are_pinned_only_until_written(tiny_pair, tmp_path):
    llm = load(tiny_pair[0], tmp_path)
    state = llm.context_store._kv
    llm.eval_last(prompt(100, seed=4))
    state.check()  # pins are holders: the invariants hold while the writer works
    llm.cache.flush()
    llm.context_store.unpin_written()
    assert not state._pins
    state.check()


def test_reading_is_skipped_where_computing_is_faster(tiny_pair, tmp_path):
    ids = prompt(200, seed=5)
    a = load(tiny_pair[0], tmp_path)
    a.eval_last(ids)
    a.cache.flush()
    b = load(tiny_pair[0], tmp_path)
    b.cache.read_bps["disk"], b.context_store.prefill_tps = 1.0, 1e12  # a slow disk, a fast prefill
    b.eval_last(ids)
    assert b.stats.disk_tokens == 0 and b.stats.cached_tokens == 0


def test_a_prompt_shorter_than_a_page_or_a_tier_of_nothing(tiny_pair, tmp_path):
    llm = load(tiny_pair[0], tmp_path)
    llm.eval_last([5, 6, 7])
    llm.cache.flush()
    assert llm.cache.pages_written["disk"] == 0 and llm.cache.disk.n_pages == 0


def test_cache_ls_du_clear(tiny_pair, tmp_path, capsys):
    ids = prompt(100, seed=6)
    for path in tiny_pair:
        llm = load(path, tmp_path)
        llm.eval_last(ids)
        llm.cache.flush()
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tiny1.gguf" in out and "tiny2.gguf" in out and "MODEL" in out
    assert main(["cache", "du", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("KB")
    assert main(["cache", "clear", str(tiny_pair[0]), "--cache-dir", str(tmp_path)]) == 0
    assert "of 1 model" in capsys.readouterr().out
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tiny1.gguf" not in out and "tiny2.gguf" in out
    assert main(["cache", "clear", "nothing-like-it", "--cache-dir", str(tmp_path)]) == 1
    assert "no pages of nothing-like-it" in capsys.readouterr().err
    assert main(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert main(["cache", "du", "--cache-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split("\n")[-2] == "0 B"


@pytest.mark.model
def test_a_restarted_server_answers_a_prompt_it_has_seen_from_disk(smollm_path, tmp_path):
    import httpx
    from conftest import LiveServer
    text = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7} marbles." for i in range(40))
    body = {"prompt": text + "\nHow many marbles are in box 12?", "max_tokens": 8, "temperature": 0}
    argv = ["-m", str(smollm_path), "--threads", "2", "--cache-disk", "256M", "--cache-dir", str(tmp_path)]
    answers = []
    for run in range(2):
        server = LiveServer(argv)
        try:
            r = httpx.post(server.url + "/v1/completions", json=body, timeout=120).json()
            answers.append(r["choices"][0]["text"])
            usage = r["usage"]
            metrics = httpx.get(server.url + "/metrics", timeout=30).text
        finally:
            server.stop()  # unloading writes what is queued
        disk = usage["llamay"]["cached_disk_tokens"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == disk + usage["llamay"]["cached_memory_tokens"]
        if run == 0:
            assert disk == 0
        else:
            assert disk == (usage["prompt_tokens"] - 1) // 32 * 32 > 0
            assert f"llamay_prompt_cache_disk_tokens_total {disk}" in metrics
    assert answers[0] == answers[1]
