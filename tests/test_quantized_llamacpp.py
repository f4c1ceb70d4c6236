"""Block formats as llama.cpp writes them: a tiny Qwen3 (hidden 256, so the 256-element formats apply)
quantized by llama.cpp's own llama_model_quantize (scripts/llamacpp_quantized.py made the files in
tests/fixtures/quantized/ and recorded llama.cpp's logits on them). The reference is float64 transformers
given the file's own dequantized weights (gguf-py's dequantization, which llamay's equals bit for bit):
llamay is no further from it than llama.cpp is. Both quantize the activations for the block formats, so
the error is spread over every logit: the distance is the RMS over all of them relative to the
reference's. (The largest single element is no measure here: on IQ4_NL llamay's is 2.24e-2 of max |logit|
against llama.cpp's 2.04e-2, while its RMS is 1.93e-2 against 2.01e-2.)"""
import copy
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

import llamay
from arch_models import CASES, Case, build, sha256, token_ids

OUT = Path(__file__).parent / "fixtures" / "quantized"
FORMATS = {"Q4_K_M": 15, "IQ4_XS": 30, "IQ4_NL": 25}  # llama_ftype
CASE = Case("qwen3", "Qwen3ForCausalLM", "Qwen3Config", dict(
    CASES["qwen3"].extra, vocab_size=260, hidden_size=256, intermediate_size=256, head_dim=64,
    num_hidden_layers=1))


def build_quantizable():
    return build(CASE)


def dequantized_model(path: Path):
    """transformers' Qwen3 holding the GGUF file's weights, dequantized by gguf-py."""
    model = copy.deepcopy(build_quantizable()).double()
    reader = gguf.GGUFReader(path)
    weights = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, model.config.num_hidden_layers)
    with torch.no_grad():
        for hf_name, p in model.named_parameters():
            if hf_name == "lm_head.weight":  # tied
                continue
            w = weights[names.get_name(hf_name, try_suffixes=(".weight", ".bias"))]
            p.copy_(torch.from_numpy(np.asarray(w, np.float64).reshape(p.shape)))
    model.set_attn_implementation("eager")
    return model


def rms_rel(got: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.sqrt(((got.astype(np.float64) - ref) ** 2).mean() / (ref ** 2).mean()))


@pytest.fixture(scope="module")
def llamacpp():
    return np.load(OUT / "llamacpp_logits.npz")


@pytest.mark.parametrize("name", list(FORMATS))
def test_no_further_from_the_dequantized_model_than_llamacpp(llamacpp, name):
    path = OUT / f"qwen3-tiny-{name}.gguf"
    assert sha256(path) == str(llamacpp[f"{name}/sha256"])
    ids = token_ids(260)
    with torch.no_grad():
        exact = dequantized_model(path)(torch.tensor([ids])).logits[0].numpy()
    llm = llamay.load(path, threads=1, kv="f32", n_ctx=64)
    types = {t.qtype.name for t in llamay.engine.GGUFReader(path).tensors.values()}
    ours = llm.logits(ids)
    d_ours, d_llamacpp = rms_rel(ours, exact), rms_rel(llamacpp[f"{name}/f32kv"], exact)
    # the K-quants' activations are quantized as llama.cpp's Q8_K (one scale per 256 values), so there the two
    # differ by their summation order only: a relative 1e-6 is that float noise, not a step away from the math
    assert d_ours <= d_llamacpp * (1 + 1e-6), f"{name} ({sorted(types)}): llamay {d_ours:.2e}, llama.cpp {d_llamacpp:.2e}"
    assert (ours.argmax(1) == exact.argmax(1)).mean() >= 0.9
