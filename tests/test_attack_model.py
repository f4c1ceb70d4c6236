"""A GGUF file that parses but disagrees with itself gets one clear error, ModelFileError naming the key or
tensor, before any kernel sees it; a valid one still loads and runs.

Files are tiny models built by scripts/fuzz_load.py (no torch) with edits applied; each load runs in a
child forked by that script, so a regression that crashes the kernels fails a test instead of killing
the runner. The tiny llama: 2 blocks, n_embd 64, 4 heads of 16 with 2 KV heads, n_ff 256, 272 tokens,
128 positions. The tiny bert: 2 blocks, n_embd 64, 4 heads, n_ff 128, 32 positions."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llamay.models import ModelFileError, UnsupportedModel

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "fuzz_load.py"
U32, I32, F32, BOOL, STRING, U64 = 4, 5, 6, 7, 8, 10
FUZZ_SEED, FUZZ_CASES = 1, 300


def _set(key, value, vtype=U32):
    return ["set", key, value, vtype]


# name -> (base, edits, text the ModelFileError message must contain)
ATTACKS = {
    "attn_q shape": ("llama", [["shape", "blk.0.attn_q.weight", [64, 512]]],
                     "blk.0.attn_q.weight has shape [64, 512], expected [64, 64]"),
    "ffn_down shape": ("llama", [["shape", "blk.1.ffn_down.weight", [512, 64]]],
                       "blk.1.ffn_down.weight has shape [512, 64], expected [256, 64]"),
    "attn_k swapped dims": ("llama", [["shape", "blk.0.attn_k.weight", [32, 64]]],
                            "blk.0.attn_k.weight has shape [32, 64], expected [64, 32]"),
    "norm 2-D": ("llama", [["shape", "blk.0.attn_norm.weight", [64, 1]]],
                 "blk.0.attn_norm.weight has shape [64, 1], expected [64]"),
    "token_embd rows": ("llama", [["shape", "token_embd.weight", [64, 300]]],
                        "token_embd.weight has shape [64, 300], expected [64, 272]"),
    "head_count_kv 2 of 9 heads": ("llama", [_set("llama.attention.head_count", 9)],
                                   "llama.attention.head_count_kv = 2 does not divide "
                                   "llama.attention.head_count = 9"),
    "head_count_kv above head_count": ("llama", [_set("llama.attention.head_count_kv", 8)],
                                       "llama.attention.head_count_kv = 8 does not divide"),
    "head_count 7": ("llama", [_set("llama.attention.head_count", 7), ["del", "llama.attention.head_count_kv"],
                               ["del", "llama.attention.key_length"], ["del", "llama.attention.value_length"]],
                     "llama.attention.head_count = 7 does not divide llama.embedding_length = 64"),
    "head_count 8": ("llama", [_set("llama.attention.head_count", 8)],
                     "blk.0.attn_q.weight has shape [64, 64], expected [64, 128]"),
    "head_count 0": ("llama", [_set("llama.attention.head_count", 0)],
                     "llama.attention.head_count = 0 is out of range"),
    "rope dimension_count 1024": ("llama", [_set("llama.rope.dimension_count", 1024)],
                                  "llama.rope.dimension_count = 1024 must be even, at most 1024 and at most "
                                  "the head size 16 (llama.attention.key_length)"),
    "rope dimension_count odd": ("llama", [_set("llama.rope.dimension_count", 15)],
                                 "llama.rope.dimension_count = 15"),
    "key_length 48": ("llama", [_set("llama.attention.key_length", 48), _set("llama.attention.value_length", 48)],
                      "blk.0.attn_q.weight has shape [64, 64], expected [64, 192]"),
    "value_length differs": ("llama", [_set("llama.attention.key_length", 48)],
                             "llama.attention.value_length = 16 differs from the key length 48"),
    "context_length 0": ("llama", [_set("llama.context_length", 0)], "llama.context_length = 0 is out of range"),
    "block_count 2**32-1": ("llama", [_set("llama.block_count", 2**32 - 1)],
                            "llama.block_count = 4294967295 is out of range"),
    "block_count 2**31-1": ("llama", [_set("llama.block_count", 2**31 - 1)],
                            "llama.block_count = 2147483647, but the file holds tensors of 2 blocks"),
    "block_count 3": ("llama", [_set("llama.block_count", 3)],
                      "llama.block_count = 3, but the file holds tensors of 2 blocks"),
    "embedding_length a string": ("llama", [_set("llama.embedding_length", "64", STRING)],
                                  "llama.embedding_length must be an integer, got str '64'"),
    "head_count an array": ("llama", [_set("llama.attention.head_count", ["a"], None)],
                            "llama.attention.head_count must be an integer, got an array of 1"),
    "per-layer head_count of the wrong length": ("llama", [_set("llama.attention.head_count", [4, 4, 4], None)],
                                                 "llama.attention.head_count has 3 entries"),
    "context_length a bool": ("llama", [_set("llama.context_length", True, BOOL)],
                              "llama.context_length must be an integer, got bool True"),
    "head_count_kv huge": ("llama", [_set("llama.attention.head_count_kv", 2**64 - 1, U64)],
                           "llama.attention.head_count_kv = 18446744073709551615 is out of range"),
    "eps a string": ("llama", [_set("llama.attention.layer_norm_rms_epsilon", "1e-5", STRING)],
                     "llama.attention.layer_norm_rms_epsilon must be a number, got str '1e-5'"),
    "eps 0": ("llama", [_set("llama.attention.layer_norm_rms_epsilon", 0.0, F32)],
              "llama.attention.layer_norm_rms_epsilon = 0.0 is out of range"),
    "freq_base nan": ("llama", [_set("llama.rope.freq_base", float("nan"), F32)],
                      "llama.rope.freq_base = nan is out of range"),
    "sliding_window -1": ("llama", [_set("llama.attention.sliding_window", -1, I32)],
                          "llama.attention.sliding_window = -1 is out of range"),
    "vocab_size disagrees": ("llama", [_set("llama.vocab_size", 300)],
                             "llama.vocab_size = 300 disagrees with the 272 entries of tokenizer.ggml.tokens"),
    "architecture an int": ("llama", [_set("general.architecture", 5)],
                            "general.architecture must be a string, got int 5"),
    "norm quantized": ("llama", [["type", "output_norm.weight", "Q8_0"]],
                       "output_norm.weight is Q8_0, which llamay cannot use as a norm or bias vector"),
    "matrix of int32": ("llama", [["type", "blk.0.attn_q.weight", "I32"]],
                        "blk.0.attn_q.weight is I32, which llamay cannot use as a matmul weight"),
    "matrix without a kernel": ("llama", [["type", "blk.1.ffn_down.weight", "Q8_K"]],
                                "blk.1.ffn_down.weight is Q8_K, which llamay cannot use as a matmul weight"),
    "tied embedding of int8": ("llama", [["drop", "output.weight"], ["type", "token_embd.weight", "I8"]],
                               "token_embd.weight is I8, which llamay cannot use as a tied embedding"),
    "missing tensor": ("llama", [["drop", "blk.1.ffn_up.weight"]], "missing tensors ['blk.1.ffn_up.weight']"),
    "extra tensor": ("llama", [["add", "blk.0.attn_q_norm.weight", [16], "F32"]],
                     "unexpected tensors ['blk.0.attn_q_norm.weight']"),
    "extra block": ("llama", [["rename", "blk.1.ffn_up.weight", "blk.2.ffn_up.weight"]],
                    "missing tensors ['blk.1.ffn_up.weight']"),
    "bert head_count 5": ("bert", [_set("bert.attention.head_count", 5)],
                          "bert.attention.head_count = 5 does not divide bert.embedding_length = 64"),
    "bert attn_q shape": ("bert", [["shape", "blk.1.attn_q.weight", [64, 128]]],
                          "blk.1.attn_q.weight has shape [64, 128], expected [64, 64]"),
    "bert ffn_up bias shape": ("bert", [["shape", "blk.0.ffn_up.bias", [64]]],
                               "blk.0.ffn_up.bias has shape [64], expected [128]"),
    "bert position table": ("bert", [["shape", "position_embd.weight", [64, 16]]],
                            "position_embd.weight has shape [64, 16], expected [64, 32]"),
    "bert context_length 0": ("bert", [_set("bert.context_length", 0)], "bert.context_length = 0 is out of range"),
    "bert block_count 2**31-1": ("bert", [_set("bert.block_count", 2**31 - 1)],
                                 "bert.block_count = 2147483647, but the file holds tensors of 2 blocks"),
    "bert pooling_type 9": ("bert", [_set("bert.pooling_type", 9)], "bert.pooling_type = 9 is out of range"),
    "bert causal an int": ("bert", [_set("bert.attention.causal", 0)],
                           "bert.attention.causal must be a bool, got int 0"),
    "bert norm quantized": ("bert", [["type", "token_embd_norm.weight", "Q8_0"]],
                            "token_embd_norm.weight is Q8_0, which llamay cannot use as a norm or bias vector"),
    "bert missing bias": ("bert", [["drop", "blk.0.ffn_down.bias"]], "missing tensors ['blk.0.ffn_down.bias']"),
    # tokenizer metadata of the wrong shape: the same one error, not whatever the tokenizer hit
    "merges not an array": ("llama", [_set("tokenizer.ggml.merges", 5)], "tokenizer metadata"),
    "unknown pre-tokenizer": ("llama", [_set("tokenizer.ggml.pre", "zzz", STRING)], "pre-tokenizer 'zzz'"),
    "bos id a string": ("llama", [_set("tokenizer.ggml.bos_token_id", "x", STRING)], "tokenizer metadata"),
    "no tokenizer model": ("llama", [["del", "tokenizer.ggml.model"]], "unsupported tokenizer model None"),
    "short token types": ("llama", [_set("tokenizer.ggml.token_type", [1, 2], None)], "token_type has 2 entries"),
    "bert merges": ("bert", [_set("tokenizer.ggml.model", "gpt2", STRING)], "tokenizer"),
}
VALID = {"llama": ("llama", []), "llama tied": ("llama", [["drop", "output.weight"]]), "bert": ("bert", []),
         "llama uniform per-layer head_count": ("llama", [_set("llama.attention.head_count", [4, 4], None)])}


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """case name -> [outcome, detail], every case loaded in its own forked child."""
    cases = {name: {"base": base, "edits": edits} for name, (base, edits, *_) in {**ATTACKS, **VALID}.items()}
    path = tmp_path_factory.mktemp("attacks") / "cases.json"
    path.write_text(json.dumps(cases))
    run = _script("--edits", str(path), "--jobs", "2", timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_model_file_error_is_the_unsupported_model_value_error():
    assert issubclass(ModelFileError, UnsupportedModel) and issubclass(ModelFileError, ValueError)


@pytest.mark.parametrize("name", list(VALID))
def test_valid_file_loads_and_runs(outcomes, name):
    assert outcomes[name] == ["loaded", "finite"], f"{name}: {outcomes[name]}"


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_is_one_clear_error(outcomes, name):
    outcome, detail = outcomes[name]
    assert outcome == "ModelFileError", f"{name}: {outcome}: {detail}"
    assert ATTACKS[name][2] in detail


def test_fuzzed_files_load_or_fail_cleanly(tmp_path):
    """Seeded hostile mutations (edge integers, wrong types, reshaped, retyped, dropped, renamed tensors)
    of both tiny models: each loads and runs, or is ModelFileError / GGUFError; no crash, hang or other
    exception. Both ends are reached, so the fuzzer exercises the checks and the kernels."""
    run = _script("--cases", str(FUZZ_CASES), "--seed", str(FUZZ_SEED), "--base", "llama,bert", "--jobs", "2",
                  "--json", "--timeout", "30", "--save", str(tmp_path), "--progress", "1000", timeout=240)
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    bad = {k: counts[k] for k in ("foreign", "crash", "hang", "UnsupportedModel") if counts[k]}
    assert not bad and run.returncode == 0, f"fuzz seed {FUZZ_SEED}: {bad}\n{run.stderr[-4000:]}"
    assert sum(counts.values()) == FUZZ_CASES
    assert counts["loaded"] > 10 and counts["ModelFileError"] > 100 and counts["GGUFError"] > 0, counts
