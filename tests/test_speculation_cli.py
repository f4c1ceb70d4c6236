"""Speculative decoding from the CLI and the server: `llamay bench --spec`, `--draft-model` on run and serve
(a draft model of another vocabulary refused by run, noted and left out by serve), and a request's spec
checked against what its model can run."""
import json
import sys
from pathlib import Path

import httpx
import pytest

from conftest import LiveServer
from llamay.cli.main import main
from llamay.settings import SPEC

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fuzz_gguf import tiny_decoder, Geometry  # noqa: E402

pytestmark = pytest.mark.model
BODY = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,", "n_predict": 32,
        "temperature": 0}


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("draft") / "tiny.gguf"
    path.write_bytes(tiny_decoder(Geometry(), seed=1).to_bytes())
    return path


def test_bench_spec_reports_the_speedup_and_tokens_per_pass(capsys, smollm_path):
    argv = ["bench", "-m", str(smollm_path), "--spec", "ngram", "--task", "tool", "--decode", "24", "-r", "1"]
    assert main(argv + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["mode"] == "ngram" and r["task"] == "tool" and r["plain_tok_s"] > 0 and r["spec_tok_s"] > 0
    assert r["drafted_tokens"] >= r["accepted_tokens"] > 0 and r["tokens_per_pass"] > 1
    assert r["decode_passes"] == r["n_decode"] - 1 - r["accepted_tokens"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "spec none" in out and "spec ngram" in out and "tokens per decode pass" in out


def test_bench_spec_draft_needs_a_draft_model(capsys, smollm_path):
    assert main(["bench", "-m", str(smollm_path), "--spec", "draft"]) == 1
    assert "--spec draft and --draft-model go together" in capsys.readouterr().err


def test_run_refuses_a_draft_model_of_another_vocabulary(capsys, smollm_path, other_vocab):
    assert main(["run", "-m", str(smollm_path), "--draft-model", str(other_vocab), "-p", "Hi", "-n", "2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "draft model tiny.gguf has 272 tokens, the model 49152" in err


def test_run_with_a_draft_model_prints_the_same(capsys, smollm_path):
    argv = ["run", "-m", str(smollm_path), "-p", BODY["prompt"], "-n", "24", "--temp", "0"]
    assert main(argv + ["--spec", "none"]) == 0
    plain = capsys.readouterr().out
    assert main(argv + ["--draft-model", str(smollm_path)]) == 0
    assert capsys.readouterr().out == plain


def test_serve_notes_a_model_the_draft_model_cannot_draft_for(capsys, smollm_path, other_vocab):
    from llamay.cli.serve import _check_draft
    _check_draft("smollm2", str(smollm_path), str(other_vocab))
    assert "smollm2 runs without the draft model: draft model tiny.gguf has 272 tokens" in capsys.readouterr().err
    _check_draft("smollm2", str(smollm_path), str(smollm_path))
    assert capsys.readouterr().err == ""


def test_served_with_and_without_a_draft_model(smollm_path, other_vocab):
    with_draft = LiveServer(["-m", str(smollm_path), "--threads", "2", "--draft-model", str(smollm_path)])
    try:
        runs = [httpx.post(with_draft.url + "/completion", json={**BODY, **extra}, timeout=60)
                for extra in ({}, {"spec": "none"}, {"spec": "ngram"}, {"spec": "tree"})]
        assert [r.status_code for r in runs] == [200] * 4 and len({r.json()["content"] for r in runs}) == 1
        loaded = next(iter(with_draft.registry.loaded.values()))
        assert loaded.llm.draft is not None and loaded.scheduler.speculation == "draft"
    finally:
        with_draft.stop()
    without = LiveServer(["-m", str(smollm_path), "--threads", "2", "--draft-model", str(other_vocab)])
    try:
        assert httpx.post(without.url + "/completion", json=BODY, timeout=60).status_code == 200
        loaded = next(iter(without.registry.loaded.values()))
        assert loaded.llm.draft is None and loaded.scheduler.speculation == SPEC.mode
        r = httpx.post(without.url + "/completion", json={**BODY, "spec": "draft"}, timeout=60)
        assert r.status_code == 400 and "spec draft needs a draft model" in r.json()["error"]["message"]
    finally:
        without.stop()
