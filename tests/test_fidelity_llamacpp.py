"""Our logits against llama.cpp's on the same files (fixtures from llama.cpp 0c1e570, see their README).

llama.cpp is not an exact reference: its own batched and token-by-token logits differ by up to ~1 logit.
So: greedy agreement >= 95% with disagreements only at near-ties, last-position logits highly
correlated, perplexity within 1%."""
import json

import numpy as np
import pytest

import llamay
from llamay.measure.perplexity import perplexity

pytestmark = pytest.mark.model
MODELS = {"smollm2-135m": "smollm_path", "gemma3-270m": "gemma_path"}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request, fixtures_dir):
    path = request.getfixturevalue(MODELS[request.param])
    llm = llamay.load(path, threads=2, n_ctx=1024)
    folder = fixtures_dir / "llamacpp" / request.param
    return request.param, llm, folder


def anchors(folder):
    return json.loads((folder / "anchors.json").read_text())["prompts"]


def test_prompt_tokens_match(model):
    _, llm, folder = model
    for p in anchors(folder):
        assert llm.tokenize(p["prompt"], add_special=True, parse_special=True) == p["prompt_token_ids"]


def test_greedy_continuation_agreement(model):
    name, llm, folder = model
    agree = total = 0
    for p in anchors(folder):
        prompt, cont = p["prompt_token_ids"], p["greedy_32_token_ids"]
        logits = llm.logits(prompt + cont)[len(prompt) - 1:-1]  # predicts each continuation token
        ours = logits.argmax(axis=1)
        for row, mine, theirs in zip(logits, ours, cont):
            total += 1
            if mine == theirs:
                agree += 1
            else:  # a disagreement must be a near-tie for us too
                assert row[mine] - row[theirs] <= 1.0, (name, p["index"], int(mine), theirs)
    print(f"{name}: greedy agreement {agree}/{total}")
    assert agree / total >= 0.95


def test_last_position_logits_correlate(model):
    name, llm, folder = model
    corrs = []
    for p in anchors(folder):
        ref = np.load(folder / p["last_prompt_position_logits_npy"])
        ours = llm.logits(p["prompt_token_ids"])[-1]
        corrs.append(np.corrcoef(ours, ref)[0, 1])
        print(f"{name} prompt {p['index']}: pearson {corrs[-1]:.5f} max|diff| {np.abs(ours - ref).max():.3f}")
        top = [t["id"] for t in next(v for k, v in p.items() if k.startswith("top"))]
        assert int(ours.argmax()) in top[:2]
    # llama.cpp's own deviation from exact math reaches ~0.997 on gemma prompt 1 (see the closing note
    # of issue 2); we hold the mean to the 0.999 for SmolLM2 and to 0.998 for gemma.
    assert min(corrs) >= 0.995
    assert np.mean(corrs) >= (0.999 if name.startswith("smollm") else 0.998)


def test_perplexity_within_one_percent(model):
    name, llm, folder = model
    ref = json.loads((folder / "ppl_T1.json").read_text())
    ppl, nll = perplexity(llm, ref["text_token_ids"], ref["bos_token_id"])
    print(f"{name}: perplexity {ppl:.4f} vs llama.cpp {ref['perplexity']:.4f}")
    assert len(nll) == ref["n_scored_tokens"]
    assert abs(ppl / ref["perplexity"] - 1) < 0.01
