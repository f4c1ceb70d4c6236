"""The codebook formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (csrc/iq.c, portable only): the
tiles' decoded weights equal gguf-py's dequantization bit for bit on random blocks, and the matmul is the
canonical per-block float sum of those weights with the quantized activations, for any thread count and
batch."""
import dataclasses

import numpy as np
import pytest

import llamay
from arch_models import CASES, build, convert, rewrite, token_ids
from conftest import CACHE
from llamay.gguf import BY_NAME, GGUFReader
from llamay.kernels import _lib
from llamay.kernels.matmul import QWeight, iq_dequantize, matmul, quantize_act

gquants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

IQ = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
rng = np.random.default_rng(13)


def random_blocks(name: str, n: int) -> np.ndarray:
    qt = BY_NAME[name]
    raw = rng.integers(0, 256, (n, qt.type_size), dtype=np.uint8)
    scale = rng.uniform(-0.02, 0.02, (n, 1)).astype(np.float16).view(np.uint8)
    if name == "IQ1_M":  # its f16 d is the top nibbles of the 4 scale words (bytes 49, 51, 53, 55)
        d = scale.view(np.uint16)[:, 0]
        for i in range(4):
            raw[:, 49 + 2 * i] = (raw[:, 49 + 2 * i] & 0x0F) | (((d >> (4 * i)) & 0xF) << 4).astype(np.uint8)
    else:
        raw[:, 0:2] = scale
    return raw


@pytest.mark.parametrize("name", IQ)
def test_decoded_weights_equal_gguf_py(name):
    raw = random_blocks(name, 64)
    want = gquants.dequantize(raw, GGMLQuantizationType[name]).astype(np.float32).reshape(-1)
    got = iq_dequantize(raw.reshape(-1), BY_NAME[name])
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("name", IQ)
def test_matmul_is_the_canonical_sum(name):
    m, k, n = 19, 512, 5
    qt = BY_NAME[name]
    raw = random_blocks(name, m * k // 256)
    w = QWeight(raw.reshape(-1), name, m, k)
    x = rng.standard_normal((n, k)).astype(np.float32)
    results = _lib.each_path(lambda: matmul(x, w, n_threads=2))
    got = results["portable"]
    assert all(np.array_equal(r, got) for r in results.values())
    assert np.array_equal(matmul(x, w, n_threads=1), got)
    assert np.array_equal(matmul(x[2:3], w, n_threads=2)[0], got[2])
    a = quantize_act(x)
    wf = gquants.dequantize(raw.reshape(m, -1), GGMLQuantizationType[name]).astype(np.float64)
    want = ((wf.reshape(1, m, k // 32, 32) * a.q.astype(np.float64).reshape(n, 1, k // 32, 32)).sum(-1)
            * a.d.astype(np.float64).reshape(n, 1, k // 32)).sum(-1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert qt.block_size == 256


def test_a_model_in_iq_formats_runs_and_embeds_through_the_c_decoder(tmp_path):
    """A tiny decoder whose every matrix and the tied embedding are IQ2_XXS / IQ3_S: it loads, its embedding
    rows are gguf-py's dequantized ones, and its logits are the same bits batched or token by token."""
    case = dataclasses.replace(CASES["qwen3"], extra={**CASES["qwen3"].extra, "hidden_size": 256, "intermediate_size": 256,
                                            "head_dim": 64, "num_hidden_layers": 1})
    f32 = convert({"q": (case, build(case))}, tmp_path, CACHE)["q"]

    def to_iq(meta, tensors):
        for name, w in list(tensors.items()):
            if w.ndim == 2 and w.shape[1] % 256 == 0:
                qname = "IQ3_S" if "ffn" in name else "IQ2_XXS"
                raw = random_blocks(qname, w.size // 256)  # any blocks: the test is of reading them
                tensors[name] = (raw.reshape(-1), qname, tuple(reversed(w.shape)))
    rewrite(f32, tmp_path / "iq.gguf", to_iq)
    llm = llamay.load(tmp_path / "iq.gguf", threads=1, kv="f32", n_ctx=64)
    ids = token_ids(300)[:12]
    emb = llm.decoder.embed(np.array(ids))
    t = GGUFReader(tmp_path / "iq.gguf").tensors["token_embd.weight"]
    raw = GGUFReader(tmp_path / "iq.gguf").data("token_embd.weight").reshape(t.shape[1], -1)[ids]
    want = gquants.dequantize(raw, GGMLQuantizationType.IQ2_XXS).reshape(len(ids), -1)
    assert np.array_equal(emb, want)
    logits = llm.logits(ids)
    ctx = llm.create_context(ids[:1])
    assert np.array_equal(np.stack([ctx.logits] + [ctx.extend([i]) for i in ids[1:]]), logits)
