"""Test-only converter: a transformers causal LM -> GGUF with F32 tensors, following llama.cpp's
convert_hf_to_gguf.py. Names and keys come from gguf-py (llama.cpp's own package), not from llamay.

Conventions reproduced (ref: llama.cpp convert_hf_to_gguf.py):
- llama, smollm3: q/k projection rows permuted from HF's rotate-half layout to GGUF's interleaved pairs
  (LlamaModel.permute); qwen2, qwen3 and the gemmas keep HF's layout (NeoX RoPE).
- gemma, gemma2, gemma3: every `*norm.weight` is stored as (1 + w) (their RMSNorm multiplies by
  1 + weight); global-layer RoPE base as rope.freq_base; lm_head dropped (tied); gemma2's softcaps and
  sliding window as metadata.
- tied embeddings: no output.weight.
- RoPE scaling of the full-attention layers: 'linear' as rope.scaling.type/factor; 'llama3' as a
  rope_freqs.weight tensor of per-pair factors (LlamaModel.generate_extra_tensors), no metadata.
"""
from __future__ import annotations

import math
import os

import gguf
import numpy as np

from llamay.gguf import GGUFWriter

ARCHS = {"llama": gguf.MODEL_ARCH.LLAMA, "smollm3": gguf.MODEL_ARCH.SMOLLM3, "granite": gguf.MODEL_ARCH.GRANITE,
         "olmo2": gguf.MODEL_ARCH.OLMO2, "starcoder2": gguf.MODEL_ARCH.STARCODER2, "phi2": gguf.MODEL_ARCH.PHI2,
         "qwen2": gguf.MODEL_ARCH.QWEN2,
         "qwen3": gguf.MODEL_ARCH.QWEN3, "gemma": gguf.MODEL_ARCH.GEMMA, "gemma2": gguf.MODEL_ARCH.GEMMA2,
         "gemma3": gguf.MODEL_ARCH.GEMMA3}
PERMUTED = ("llama", "smollm3", "granite")  # LlamaModel and its subclasses permute q/k to interleaved pairs
GEMMAS = ("gemma", "gemma2", "gemma3")  # norms stored as 1 + w (GemmaModel / Gemma2Model / Gemma3Model)
U32, F32 = int(gguf.GGUFValueType.UINT32), int(gguf.GGUFValueType.FLOAT32)


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """[n_head * head_dim, ...]: per head, rows (i, i + d/2) -> (2i, 2i + 1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _rope(cfg, layer_type: str = "full_attention") -> dict:
    rp = cfg.rope_parameters  # transformers 5: one dict, or one per layer type (gemma3)
    return rp.get(layer_type, rp)


def _layer_norm_eps(cfg) -> float | None:
    """The LayerNorm epsilon of a LayerNorm family (StarCoder 2: norm_epsilon, Phi: layer_norm_eps)."""
    return getattr(cfg, "norm_epsilon", None) or getattr(cfg, "layer_norm_eps", None)


def _head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def _rope_theta(cfg, layer_type: str) -> float:
    return float(_rope(cfg, layer_type)["rope_theta"])


def llama3_factors(cfg) -> np.ndarray:
    """Llama 3.1's RoPE: per frequency pair, 1 above the high-frequency cut (short wavelengths), `factor`
    below the low-frequency cut, and between them 1 / ((1 - s) / factor + s), s the smooth ramp."""
    rp, dim = _rope(cfg), _head_dim(cfg)
    freqs = 1.0 / (rp["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, lo, hi, ctx = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
    out = []
    for wavelen in 2 * math.pi / freqs:
        if wavelen < ctx / hi:
            out.append(1.0)
        elif wavelen > ctx / lo:
            out.append(factor)
        else:
            s = (ctx / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - s) / factor + s))
    return np.array(out, np.float32)


def hparams(arch: str, cfg) -> dict[str, tuple]:
    """GGUF metadata key -> (value, GGUF value type) for the model part (no tokenizer)."""
    k = lambda key: key.format(arch=arch)  # noqa: E731
    K = gguf.Keys
    meta = {
        K.General.ARCHITECTURE: (arch, None),
        k(K.LLM.CONTEXT_LENGTH): (cfg.max_position_embeddings, U32),
        k(K.LLM.EMBEDDING_LENGTH): (cfg.hidden_size, U32),
        k(K.LLM.BLOCK_COUNT): (cfg.num_hidden_layers, U32),
        k(K.LLM.FEED_FORWARD_LENGTH): (cfg.intermediate_size, U32),
        k(K.Attention.HEAD_COUNT): (cfg.num_attention_heads, U32),
        k(K.Attention.HEAD_COUNT_KV): (cfg.num_key_value_heads, U32),
        k(K.Attention.KEY_LENGTH): (_head_dim(cfg), U32),
        k(K.Attention.VALUE_LENGTH): (_head_dim(cfg), U32),
        **({k(K.Attention.LAYERNORM_EPS): (_layer_norm_eps(cfg), F32)} if _layer_norm_eps(cfg)
           else {k(K.Attention.LAYERNORM_RMS_EPS): (cfg.rms_norm_eps, F32)}),
        k(K.Rope.FREQ_BASE): (_rope_theta(cfg, "full_attention"), F32),
    }
    if _rope(cfg).get("rope_type") == "linear":
        meta[k(K.Rope.SCALING_TYPE)] = ("linear", None)
        meta[k(K.Rope.SCALING_FACTOR)] = (_rope(cfg)["factor"], F32)
    if arch in PERMUTED:
        meta[k(K.LLM.VOCAB_SIZE)] = (cfg.vocab_size, U32)
        meta[k(K.Rope.DIMENSION_COUNT)] = (_head_dim(cfg), U32)
    if arch == "phi2":  # Phi2Model: the rotated dims from partial_rotary_factor; FFN width 4 * n_embd
        meta[k(K.Rope.DIMENSION_COUNT)] = (int(_rope(cfg)["partial_rotary_factor"] * cfg.hidden_size)
                                           // cfg.num_attention_heads, U32)
        meta[k(K.LLM.FEED_FORWARD_LENGTH)] = (4 * cfg.hidden_size, U32)
    if arch == "granite":  # GraniteModel: the *_multiplier settings as *_scale keys
        meta[k(K.Attention.SCALE)] = (cfg.attention_multiplier, F32)
        meta[k(K.LLM.EMBEDDING_SCALE)] = (cfg.embedding_multiplier, F32)
        meta[k(K.LLM.RESIDUAL_SCALE)] = (cfg.residual_multiplier, F32)
        meta[k(K.LLM.LOGIT_SCALE)] = (cfg.logits_scaling, F32)
    if arch == "gemma2":
        meta[k(K.Attention.SLIDING_WINDOW)] = (cfg.sliding_window, U32)
        meta[k(K.LLM.ATTN_LOGIT_SOFTCAPPING)] = (cfg.attn_logit_softcapping, F32)
        meta[k(K.LLM.FINAL_LOGIT_SOFTCAPPING)] = (cfg.final_logit_softcapping, F32)
    if arch == "gemma3" and _rope_theta(cfg, "sliding_attention") != 10000.0:
        meta[k(K.Rope.FREQ_BASE_SWA)] = (_rope_theta(cfg, "sliding_attention"), F32)
    if arch == "gemma3":
        meta[k(K.Attention.SLIDING_WINDOW)] = (cfg.sliding_window, U32)
        if cfg.final_logit_softcapping:
            meta[k(K.LLM.FINAL_LOGIT_SOFTCAPPING)] = (cfg.final_logit_softcapping, F32)
    return meta


def tensors(arch: str, model) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in HF (row-major, [out, in]) shape."""
    cfg = model.config
    names = gguf.get_tensor_name_map(ARCHS[arch], cfg.num_hidden_layers)
    out = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        w = t.detach().float().numpy().copy()
        if arch in PERMUTED and name.endswith("q_proj.weight"):
            w = permute(w, cfg.num_attention_heads)
        elif arch in PERMUTED and name.endswith("k_proj.weight"):
            w = permute(w, cfg.num_key_value_heads)
        elif arch in GEMMAS and name.endswith("norm.weight"):
            w = w + np.float32(1.0)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"cannot map tensor {name!r} for {arch}")
        out[new] = np.ascontiguousarray(w, dtype=np.float32)
    if _rope(cfg).get("rope_type") == "llama3":
        out["rope_freqs.weight"] = llama3_factors(cfg)
    return out


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (the alphabet of every byte-level BPE vocab)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def gpt2_vocab(n_vocab: int) -> dict[str, tuple]:
    """A made-up byte-level BPE vocab: 256 bytes, merged letter pairs, <|endoftext|> last."""
    n_merged = n_vocab - 257
    assert 0 <= n_merged <= 26 * 26
    pairs = [(chr(97 + i % 26), chr(97 + i // 26)) for i in range(n_merged)]
    tokens = _byte_chars() + [a + b for a, b in pairs] + ["<|endoftext|>"]
    types = [1] * (n_vocab - 1) + [3]
    return {"tokenizer.ggml.model": ("gpt2", None), "tokenizer.ggml.pre": ("default", None),
            "tokenizer.ggml.tokens": (tokens, None),
            "tokenizer.ggml.token_type": (np.array(types, np.int32), None),
            "tokenizer.ggml.merges": ([f"{a} {b}" for a, b in pairs], None),
            "tokenizer.ggml.bos_token_id": (n_vocab - 1, U32),
            "tokenizer.ggml.eos_token_id": (n_vocab - 1, U32)}


def spm_vocab(n_vocab: int) -> dict[str, tuple]:
    """A made-up SentencePiece vocab in Gemma's id order: pad, eos, bos, unk, 256 bytes, pieces."""
    n_pieces = n_vocab - 260
    assert 0 <= n_pieces <= 26 * 27
    pieces = ["\u2581" + chr(97 + i % 26) + ("" if i < 26 else chr(97 + i // 26 - 1)) for i in range(n_pieces)]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2] + [6] * 256 + [1] * n_pieces
    scores = [0.0] * 260 + [-float(i) for i in range(n_pieces)]
    return {"tokenizer.ggml.model": ("llama", None), "tokenizer.ggml.tokens": (tokens, None),
            "tokenizer.ggml.scores": (np.array(scores, np.float32), None),
            "tokenizer.ggml.token_type": (np.array(types, np.int32), None),
            "tokenizer.ggml.add_space_prefix": (False, None),
            "tokenizer.ggml.padding_token_id": (0, U32), "tokenizer.ggml.eos_token_id": (1, U32),
            "tokenizer.ggml.bos_token_id": (2, U32), "tokenizer.ggml.unknown_token_id": (3, U32)}


def convert(arch: str, model) -> tuple[dict[str, tuple], dict[str, np.ndarray]]:
    """(metadata, tensors) of `model` (a transformers *ForCausalLM) as llama.cpp would convert it."""
    vocab = spm_vocab if arch in GEMMAS else gpt2_vocab
    return {**hparams(arch, model.config), **vocab(model.config.vocab_size)}, tensors(arch, model)


def write(path: str | os.PathLike, metadata: dict[str, tuple], tensors: dict[str, np.ndarray]):
    w = GGUFWriter()
    for key, (value, vtype) in metadata.items():
        w.add(key, value, vtype=vtype)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write(path)
