"""Tiny seeded random HF transformers models, one per architecture case, and their GGUF files as llama.cpp's
own convert_hf_to_gguf.py writes them (llamacpp_tree.py). Shared by the per-architecture tests and by
scripts/llamacpp_arch_logits.py, which recorded llama.cpp's logits on these very files."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from pathlib import Path

import gguf
import numpy as np
import torch
import transformers as tf

import llamacpp_tree
import tiny_tokenizers
from llamay.gguf import GGUFWriter

N_TOKENS = 24
COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, attn_implementation="eager")
NO_SPECIALS = dict(pad_token_id=None, bos_token_id=None, eos_token_id=None)
LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
GEMMA3 = dict(num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8)
GEMMA3_LINEAR = dict(full_attention=dict(rope_type="linear", factor=8.0, rope_theta=1e6),
                     sliding_attention=dict(rope_type="default", rope_theta=10000.0))
SPM_SPECIALS = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2)  # tiny_tokenizers.save_spm's ids
SPM = ("gemma", "gemma2", "phi3", "ernie4_5", "jamba")  # llama.cpp converts these from a SentencePiece tokenizer.model
BPE_SPM = ("gemma4",)  # and these from an SPM-style BPE tokenizer.json
SHIFTED_NORMS = ("gemma", "gemma2", "gemma3")  # RMSNorm scales by (1 + w)
# Gemma 4: sliding layers of head 16, full layers of head 32 with proportional RoPE over a quarter of it,
# the last layer full; per-layer inputs; the last 2 layers reuse the K/V of the last earlier layer of their
# kind (llama.cpp takes the last unshared layer for full ones and the one before for sliding ones: so is
# every Gemma 4 file), with double-wide MLPs; layer scalars and a final softcap
S, F = "sliding_attention", "full_attention"
GEMMA4_LAYERS = [S, S, F, S, F, S, F]
GEMMA4 = dict(num_hidden_layers=7, head_dim=16, global_head_dim=32, sliding_window=8, layer_types=GEMMA4_LAYERS,
              final_logit_softcapping=3.0, hidden_size_per_layer_input=8, vocab_size_per_layer_input=300,
              num_kv_shared_layers=2, use_double_wide_mlp=True, **SPM_SPECIALS)
# Gemma 4's MoE (26B-A4B's shape): a router over 4 experts beside the dense MLP, full layers with one KV head
# whose keys are also the values, no per-layer inputs
GEMMA4_MOE = dict(GEMMA4, hidden_size_per_layer_input=0, num_kv_shared_layers=0, use_double_wide_mlp=False,
                  enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                  attention_k_eq_v=True, num_global_key_value_heads=1)


@dataclasses.dataclass(frozen=True)
class Case:
    arch: str  # general.architecture of the converted file
    model: str  # transformers class names
    config: str
    extra: dict
    add_meta: dict = dataclasses.field(default_factory=dict)  # keys llama.cpp's converter leaves out, added after
    common: bool = True  # COMMON's settings apply (not to GPT2Config, which names them otherwise)
    seed: int = 0  # build's draws: torch.manual_seed(seed), the parameters from a generator seeded seed + 1
    n_tokens: int = N_TOKENS  # the sequence the tests run (token_ids)
    n_ctx: int = 64  # the context llamay and llama.cpp ran it with (at least n_tokens)
    # config.json keys set (None: removed) before llama.cpp's converter reads it: as published checkpoints
    # spell them where transformers now saves other names
    hf_config: dict = dataclasses.field(default_factory=dict)
    # tensor names rewritten (regex -> replacement) in the saved checkpoint: where transformers saves a name
    # the published checkpoints spell otherwise
    hf_rename: dict = dataclasses.field(default_factory=dict)


CASES = {
    "llama": Case("llama", "LlamaForCausalLM", "LlamaConfig", dict(num_hidden_layers=3, tie_word_embeddings=False)),
    "qwen2": Case("qwen2", "Qwen2ForCausalLM", "Qwen2Config", dict(num_hidden_layers=3, tie_word_embeddings=True)),
    # Qwen3: per-head RMSNorm of q and k before RoPE, no biases; head_dim 32 != hidden / heads (as in Qwen3)
    "qwen3": Case("qwen3", "Qwen3ForCausalLM", "Qwen3Config",
                  dict(num_hidden_layers=3, head_dim=32, tie_word_embeddings=True)),
    # 7 layers: llama.cpp (and llamay) fix Gemma 3's pattern at 5 sliding layers per global one, so layer 5
    # is global and layer 6 slides again; head_dim 32 != hidden / heads, as in Gemma 3 270M
    "gemma3": Case("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig", GEMMA3),
    # RoPE scaling: Llama 3.1's per-pair factors (original context 64: the 8 pairs of head_dim 16 fall in
    # all three of its bands), linear scaling; Gemma 3's linear scaling of its global layers only
    "llama3-rope": Case("llama", "LlamaForCausalLM", "LlamaConfig", dict(num_hidden_layers=3, rope_parameters=LLAMA3)),
    "llama-linear": Case("llama", "LlamaForCausalLM", "LlamaConfig",
                         dict(num_hidden_layers=3, rope_parameters=dict(rope_type="linear", factor=4.0,
                                                                      rope_theta=10000.0))),
    # a sliding-layer RoPE base other than Gemma 3's 10000, as rope.freq_base_swa
    "gemma3-swa-base": Case("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
                            dict(**GEMMA3, rope_parameters=dict(
                                full_attention=dict(rope_type="default", rope_theta=1e6),
                                sliding_attention=dict(rope_type="default", rope_theta=100.0)))),
    "gemma3-linear": Case("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
                          dict(**GEMMA3, rope_parameters=GEMMA3_LINEAR)),
    # SmolLM3: no RoPE on every fourth layer (5 layers: layer 3 has none)
    "smollm3": Case("smollm3", "SmolLM3ForCausalLM", "SmolLM3Config",
                    dict(num_hidden_layers=5, tie_word_embeddings=True, **NO_SPECIALS)),
    "gemma": Case("gemma", "GemmaForCausalLM", "GemmaConfig", dict(num_hidden_layers=3, head_dim=32)),
    # Granite's four multipliers, none of them 1
    "granite": Case("granite", "GraniteForCausalLM", "GraniteConfig",
                    dict(num_hidden_layers=3, tie_word_embeddings=True, embedding_multiplier=3.0,
                         attention_multiplier=0.2, residual_multiplier=0.6, logits_scaling=2.5)),
    # StarCoder 2: LayerNorm with bias, biases on every projection, a plain GELU MLP
    "starcoder2": Case("starcoder2", "Starcoder2ForCausalLM", "Starcoder2Config",
                       dict(num_hidden_layers=3, **NO_SPECIALS)),
    # Phi-2: attention and MLP in parallel from one LayerNorm, half the head dims rotated, lm_head bias
    "phi2": Case("phi2", "PhiForCausalLM", "PhiConfig", dict(num_hidden_layers=3, intermediate_size=256,
                                                          num_key_value_heads=4, **NO_SPECIALS)),
    # OLMo 2: norms after each block only, q/k normed over the whole projection; untied, as llama.cpp
    # requires (and every OLMo 2 is)
    "olmo2": Case("olmo2", "Olmo2ForCausalLM", "Olmo2Config",
                  dict(num_hidden_layers=3, tie_word_embeddings=False, **NO_SPECIALS)),
    # OLMo 3 (GGUF architecture olmo2): 3 of every 4 layers slide (window 8), as its sliding_window_pattern
    # array says; with YaRN on the full layers only
    "olmo3": Case("olmo2", "Olmo3ForCausalLM", "Olmo3Config",
                  dict(num_hidden_layers=5, sliding_window=8, tie_word_embeddings=False, **NO_SPECIALS)),
    "olmo3-yarn": Case("olmo2", "Olmo3ForCausalLM", "Olmo3Config",
                       dict(num_hidden_layers=5, sliding_window=8, tie_word_embeddings=False, **NO_SPECIALS,
                            rope_parameters=dict(
                                full_attention=dict(rope_type="yarn", factor=4.0, rope_theta=10000.0,
                                                    original_max_position_embeddings=64),
                                sliding_attention=dict(rope_type="default", rope_theta=10000.0)))),
    # ERNIE 4.5 (dense): llama's blocks, RoPE over interleaved pairs in the model's own layout
    "ernie4_5": Case("ernie4_5", "Ernie4_5ForCausalLM", "Ernie4_5Config",
                     dict(num_hidden_layers=3, tie_word_embeddings=True, use_bias=False, **SPM_SPECIALS)),
    # EXAONE 4: norms after each block only, per-head q/k norms (no sliding window: llama.cpp applies one
    # only to 64-layer files)
    "exaone4": Case("exaone4", "Exaone4ForCausalLM", "Exaone4Config",
                    dict(num_hidden_layers=3, sliding_window=None, layer_types=["full_attention"] * 3,
                         tie_word_embeddings=False, **NO_SPECIALS)),
    # EXAONE 4 with its sliding window (3 of 4 layers slide; the full layer has no RoPE), as transformers runs
    # it (llama.cpp would not apply the window to a 5-layer file)
    "exaone4-swa": Case("exaone4", "Exaone4ForCausalLM", "Exaone4Config",
                        dict(num_hidden_layers=5, sliding_window=8, sliding_window_pattern=4,
                             tie_word_embeddings=False, **NO_SPECIALS)),
    # Cohere 2: attention and FFN in parallel from one LayerNorm without bias, 3 of 4 layers sliding with
    # RoPE and the full ones without, logits scaled by 0.5
    "cohere2": Case("cohere2", "Cohere2ForCausalLM", "Cohere2Config",
                    dict(num_hidden_layers=5, sliding_window=8, sliding_window_pattern=4, logit_scale=0.5,
                         rotary_pct=1.0, tie_word_embeddings=True, **NO_SPECIALS)),  # rotary_pct: llama.cpp reads it
    # Seed-OSS: llama's blocks with q/k/v biases
    "seed_oss": Case("seed_oss", "SeedOssForCausalLM", "SeedOssConfig",
                     dict(num_hidden_layers=3, attention_bias=True, attention_out_bias=False,
                          tie_word_embeddings=False, **NO_SPECIALS)),
    # Gemma 2: even layers slide, logits of attention and output softcapped (small caps, so they bite)
    "gemma2": Case("gemma2", "Gemma2ForCausalLM", "Gemma2Config",
                   dict(num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                        attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    # Gemma 2 scales every layer, sliding ones too (unlike Gemma 3). llama.cpp's Gemma2Model writes no RoPE
    # scaling (no Gemma 2 uses any), but its runtime reads the generic keys, so they are added to the file
    "gemma2-linear": Case("gemma2", "Gemma2ForCausalLM", "Gemma2Config",
                          dict(num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                               rope_parameters=dict(rope_type="linear", factor=4.0, rope_theta=10000.0)),
                          add_meta={"gemma2.rope.scaling.type": ("linear", gguf.GGUFValueType.STRING, None),
                                    "gemma2.rope.scaling.factor": (4.0, gguf.GGUFValueType.FLOAT32, None)}),
    # Phi-3: fused q/k/v and gate/up; LongRoPE (the long factors: 24 tokens and every context run are past
    # the original 16, and its attention factor sqrt(1 + ln 16 / ln 16) on cos and sin); no sliding
    # window, as llama.cpp
    "phi3": Case("phi3", "Phi3ForCausalLM", "Phi3Config",
                 dict(num_hidden_layers=3, sliding_window=None, tie_word_embeddings=False, original_max_position_embeddings=16,
                      rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                           original_max_position_embeddings=16,
                                           short_factor=[1.0 + 0.25 * i for i in range(8)],
                                           long_factor=[2.0 + i for i in range(8)]), **SPM_SPECIALS)),
    # Phi-4-mini: 3/4 of each head rotated, tied embeddings
    "phi3-partial": Case("phi3", "Phi3ForCausalLM", "Phi3Config",
                         dict(num_hidden_layers=3, sliding_window=None, tie_word_embeddings=True, original_max_position_embeddings=16,
                              rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                   partial_rotary_factor=0.75, original_max_position_embeddings=16,
                                                   short_factor=[1.0 + 0.25 * i for i in range(6)],
                                                   long_factor=[2.0 + i for i in range(6)]), **SPM_SPECIALS)),
    # GPT-2: learned positions, LayerNorm, fused q/k/v with bias, plain GELU MLP
    "gpt2": Case("gpt2", "GPT2LMHeadModel", "GPT2Config",
                 dict(n_layer=3, n_embd=64, n_head=4, n_positions=256, n_ctx=256, vocab_size=300, **NO_SPECIALS), common=False),
    # YaRN as Qwen3 uses it for long contexts (factor 4 over an original 64; the ramp's ends truncated)
    "qwen3-yarn": Case("qwen3", "Qwen3ForCausalLM", "Qwen3Config",
                       dict(num_hidden_layers=3, head_dim=32, tie_word_embeddings=True,
                            rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=10000.0,
                                                 original_max_position_embeddings=64))),
    # Ministral 3: llama's blocks, YaRN with mscale_all_dim, and Llama 4's attention temperature on the
    # queries at positions past the original 8 (24 tokens: two steps of it)
    "mistral3": Case("mistral3", "Ministral3ForCausalLM", "Ministral3Config",
                     dict(num_hidden_layers=3, tie_word_embeddings=False, **NO_SPECIALS,
                          rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=10000.0, beta_fast=32.0,
                                               beta_slow=1.0, mscale=1.0, mscale_all_dim=0.5,
                                               original_max_position_embeddings=8, llama_4_scaling_beta=0.3))),
    # Qwen2-MoE: 8 experts of 32, 2 per token, not renormalized, and a shared expert of 48 behind a
    # sigmoid gate
    "qwen2moe": Case("qwen2moe", "Qwen2MoeForCausalLM", "Qwen2MoeConfig",
                     dict(num_hidden_layers=3, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                          shared_expert_intermediate_size=48, norm_topk_prob=False, tie_word_embeddings=False,
                          decoder_sparse_step=1, mlp_only_layers=[], **NO_SPECIALS)),
    # Qwen3-MoE: 8 experts of 32, 2 per token, weights renormalized over them (norm_topk_prob)
    "qwen3moe": Case("qwen3moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
                     dict(num_hidden_layers=3, head_dim=32, num_experts=8, num_experts_per_tok=2,
                          moe_intermediate_size=32, norm_topk_prob=True, tie_word_embeddings=True)),
    # Granite MoE: softmax over the chosen experts' logits, Granite's four multipliers
    "granitemoe": Case("granitemoe", "GraniteMoeForCausalLM", "GraniteMoeConfig",
                       dict(num_hidden_layers=3, tie_word_embeddings=True, num_local_experts=8, num_experts_per_tok=3,
                            intermediate_size=32, embedding_multiplier=3.0, attention_multiplier=0.2,
                            residual_multiplier=0.6, logits_scaling=2.5)),
    # gpt-oss: attention sinks, even layers slide (window 8), YaRN (factor 8 over an original 64, not
    # truncated: llama.cpp truncates, which moves pair 2's ramp from 0.99 to 0.67), 8 experts of 32 with biases, 2 per token by a softmax over their logits, clamped SwiGLU
    "gpt-oss": Case("gpt-oss", "GptOssForCausalLM", "GptOssConfig",
                    dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_local_experts=8, num_experts_per_tok=2, intermediate_size=32, sliding_window=8,
                         tie_word_embeddings=False, swiglu_limit=7.0,
                         rope_parameters=dict(rope_type="yarn", factor=8.0, rope_theta=10000.0, beta_fast=32.0,
                                              beta_slow=1.0, truncate=False, original_max_position_embeddings=64),
                         **NO_SPECIALS)),
    # gpt-oss held out from the case above: another seed and shape (4 layers, 6 heads of 32 over 2 K/V heads, 6
    # experts of 40, 3 per token, window 16, YaRN x4 over an original 48, base 5000, not truncated) and 96
    # tokens, so the windows slide far and positions run twice past the original context (llama.cpp, which
    # truncates the ramp, is 0.48 off transformers here; llamay 9e-6 with float32 K/V)
    "gpt-oss-long": Case("gpt-oss", "GptOssForCausalLM", "GptOssConfig",
                         dict(num_hidden_layers=4, hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
                              head_dim=32, num_local_experts=6, num_experts_per_tok=3, intermediate_size=40,
                              sliding_window=16, tie_word_embeddings=False, swiglu_limit=7.0, vocab_size=320,
                              max_position_embeddings=192,
                              rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=5000.0, beta_fast=32.0,
                                                   beta_slow=1.0, truncate=False,
                                                   original_max_position_embeddings=48),
                              **NO_SPECIALS), seed=5, n_tokens=96, n_ctx=128),
    "gemma3-softcap": Case("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig", dict(**GEMMA3, final_logit_softcapping=3.0)),
    "gemma4": Case("gemma4", "Gemma4ForCausalLM", "Gemma4TextConfig", GEMMA4),
    "gemma4-moe": Case("gemma4", "Gemma4ForCausalLM", "Gemma4TextConfig", GEMMA4_MOE),
}


def build(case: Case, **overrides):
    """A seeded random model. Every parameter is redrawn: HF's init leaves norms at 1 (0 for Gemma) and
    biases at 0, which would hide a wrong norm or bias; scale 0.15 gives attention far from uniform."""
    torch.manual_seed(case.seed)
    base = COMMON if case.common else dict(attn_implementation="eager")
    config = getattr(tf, case.config)(**{**base, **case.extra, **overrides})
    model = getattr(tf, case.model)(config)
    g = torch.Generator().manual_seed(case.seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if re.search(r"(norm|\.ln_\w+)\.weight$", name):  # Gemma's RMSNorm scales by (1 + w): same range
                p.copy_(torch.rand(p.shape, generator=g) + (-0.5 if case.arch in SHIFTED_NORMS else 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.ndim == 1 else 0.15))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):  # Gemma 4's per-layer output scale (a buffer; 1 by default)
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith(("expert_bias", "e_score_correction_bias")):  # an expert selection bias (a
                b.copy_(torch.randn(b.shape, generator=g) * 0.3)  # buffer, 0 by default): LFM2-MoE's, Nemotron 3's
    return model.eval()


def token_ids(n_vocab: int, n: int = N_TOKENS) -> list[int]:
    return np.random.default_rng(2).integers(0, n_vocab, n).tolist()


def hf_logits(model, ids, attn: str = "eager") -> np.ndarray:
    model.set_attn_implementation(attn)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def edited_logits(case: Case, edit=None, **overrides) -> np.ndarray:
    """float32 transformers' logits of the case's model built with config overrides, then edit(model) under
    no_grad (tests that a setting or parameter moves the logits)."""
    model = build(case, **overrides)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    return hf_logits(model, token_ids(model.config.vocab_size, case.n_tokens))


def float64_logits(model, ids) -> np.ndarray:
    """The logits of a float64 copy (eager attention and experts: the defaults have no float64)."""
    exact = copy.deepcopy(model).double()
    exact.set_attn_implementation("eager")
    exact.set_experts_implementation("eager")
    with torch.no_grad():
        return exact(torch.tensor([ids]), use_cache=False).logits[0].numpy()


def rel_diff(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got - ref| / max |ref| (got finite)."""
    assert got.shape == ref.shape and np.isfinite(got).all()
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def convert(models: dict[str, tuple[Case, object]], out: Path, cache: Path) -> dict[str, Path]:
    """name -> GGUF file of each (case, model), every one written by llama.cpp's converter in one process."""
    jobs, paths = [], {}
    for name, (case, model) in models.items():
        d = out / f"{name}-hf"
        model.save_pretrained(d)
        as_published(d, case.hf_config, case.hf_rename)
        save = (tiny_tokenizers.save_spm if case.arch in SPM else
                tiny_tokenizers.save_bpe_spm if case.arch in BPE_SPM else tiny_tokenizers.save_bpe)
        save(d, model.config.vocab_size)
        paths[name] = out / f"{name}.gguf"
        jobs.append((d, paths[name]))
    llamacpp_tree.convert(cache, jobs)
    for name, (case, _) in models.items():
        if case.add_meta:
            rewrite(paths[name], paths[name], lambda meta, tensors: meta.update(case.add_meta))
    return paths


def edit_config(path: Path, keys: dict):
    config = json.loads(path.read_text())
    config.update(keys)
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}, indent=2))


def as_published(d: Path, hf_config: dict | None = None, hf_rename: dict | None = None):
    """A saved checkpoint as the published ones spell it: config.json keys set (edit_config), tensor names
    rewritten (regex -> replacement; one safetensors file)."""
    if hf_config:
        edit_config(d / "config.json", hf_config)
    if not hf_rename:
        return
    if (d / "model.safetensors.index.json").exists():
        raise ValueError("renaming tensors of a sharded checkpoint")
    from safetensors.torch import load_file, save_file
    for f in d.glob("*.safetensors"):
        tensors = load_file(f)
        for pattern, new in hf_rename.items():
            tensors = {re.sub(pattern, new, k): v for k, v in tensors.items()}
        save_file(tensors, f, metadata={"format": "pt"})


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def rewrite(src: Path, dst: Path, edit):
    """Copies a float32 GGUF file through edit(metadata, tensors): metadata key -> (value, GGUF type, array
    element type), tensors name -> float32 array (numpy shape, rows first) or, to write a block format,
    (raw uint8 bytes, type name, GGUF shape); both dicts edited in place."""
    r = gguf.GGUFReader(src)
    meta = {}
    for f in r.fields.values():
        if not f.name.startswith("GGUF.") and f.name != "general.alignment":
            meta[f.name] = (f.contents(), int(f.types[0]), int(f.types[1]) if len(f.types) > 1 else None)
    tensors = {t.name: np.array(t.data, np.float32, copy=True).reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}
    del r  # its map closed before dst (which may be src) is written
    edit(meta, tensors)
    w = GGUFWriter()
    for key, (value, vtype, elem) in meta.items():
        w.add(key, value, vtype=vtype, elem_type=elem)
    for name, data in tensors.items():
        if isinstance(data, tuple):
            w.add_tensor(name, data[0], data[1], data[2])
        else:
            w.add_tensor(name, np.ascontiguousarray(data, np.float32))
    w.write(dst)


def check_every_way(llm, ids: list[int], want: np.ndarray, name: str):
    """With ==: llm's logits of ids (at its thread count) are want; token by token too; the second half
    batched in one pass beside another sequence (the first half reversed) too. Leaves llm reset."""
    assert np.array_equal(llm.logits(ids), want), name
    ctx = llm.create_context(ids[:1])
    steps = np.stack([ctx.logits] + [ctx.extend([t]) for t in ids[1:]])
    assert np.array_equal(steps, want), name
    llm.reset()
    half = len(ids) // 2
    a, b = llm.create_context(ids[:half]), llm.create_context(ids[half:][::-1])

    def batched(store):  # the rest of a beside the whole of b's reversed text, in one pass
        return store.compute([(a.id, ids[half:]), (b.id, ids[:half])], None)
    assert np.array_equal(llm.scheduler.do(batched)[:len(ids) - half], want[half:]), name
    llm.reset()


def zeroed(suffix: str):
    """An edit of a model (under no_grad) zeroing every parameter and buffer whose name ends with suffix."""
    def edit(model):
        found = [t for n, t in [*model.named_parameters(), *model.named_buffers()] if n.endswith(suffix)]
        assert found, suffix
        for t in found:
            t.zero_()
    return edit
