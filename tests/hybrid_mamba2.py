"""Tiny seeded random HF models with Mamba2 mixers (arch_models.Case; built and converted by arch_models),
recorded by `scripts/llamacpp_arch_logits.py --cases hybrid_mamba2` into
tests/fixtures/llamacpp_hybrid_mamba2.npz. Vocabularies of 304: llama.cpp's converter pads Mamba2 vocabularies
to a multiple of 16 (Granite and Nemotron-H: 8), so 304 keeps the file's vocabulary the model's.
96 tokens: past the conv window (4) and HF's scan chunk (32) many times.

What llama.cpp's converter writes (numpy shapes, rows first; the Mamba2 mixer's tensors and math:
src/llamay/models/mixer_mamba2.py):
- every family: {arch}.ssm.conv_kernel (d_conv), ssm.inner_size (d_inner), ssm.state_size (d_state),
  ssm.time_step_rank (the head count, d_inner / head_dim), ssm.group_count (n_group); a Mamba2 layer holds
  attn_norm.weight [n_embd] and blk.N.ssm_{in,conv1d,dt,a,d,norm,out}
- mamba2: feed_forward_length 0, attention.head_count 0, attention.layer_norm_rms_epsilon. Each layer
  x + mamba2(rmsnorm(x)); no FFN; output_norm, output (or tied)
- granitehybrid: attention.head_count_kv per layer (0: Mamba2), head_count, layer_norm_rms_epsilon,
  feed_forward_length (the dense MLP's, or each expert's), expert_count (0: dense), expert_used_count,
  expert_shared_feed_forward_length, attention.scale, embedding_scale, residual_scale, logit_scale,
  rope.scaling.finetuned (false: no RoPE; Granite 4). Layer: x + residual_scale * mixer(rmsnorm(x)), then
  x + residual_scale * ffn(rmsnorm(x)) (ffn_norm); attention layers attn_{q,k,v,output}, scaled by
  attention.scale; dense FFN ffn_{gate,up,down} (SiLU); MoE ffn_gate_inp [E, n_embd], ffn_{gate,up}_exps
  [E, n_ff, n_embd], ffn_down_exps [E, n_embd, n_ff] (softmax over the chosen k) plus the shared MLP
  ffn_{gate,up,down}_shexp, added ungated. Embeddings times embedding_scale, logits divided by logit_scale
- nemotron_h: attention.head_count_kv per layer and feed_forward_length per layer (0 in the others): each
  layer is exactly one of Mamba2 (both 0), attention (kv > 0: attn_{q,k,v,output}, no RoPE, key_length),
  MLP (ffn > 0: ffn_up, ffn_down, squared ReLU, no gate); each x + block(rmsnorm(x)), the norm always
  attn_norm; eps attention.layer_norm_epsilon (llama.cpp takes it for the RMS eps)
- falcon-h1: head_count, head_count_kv, key_length, feed_forward_length, rope.freq_base,
  layer_norm_rms_epsilon; every layer x + attention(n) + mamba2(n), n = rmsnorm(x) (attn_norm; attention
  with NeoX RoPE), then x + ffn(rmsnorm(x)) (SiLU-gated; its norm tensor is blk.N.ffn_norm, no .weight);
  no ssm_norm (y * SiLU(z)); the µP multipliers (embedding, lm_head, attention in/out, key, ssm in/out,
  per-part in_proj rows, MLP) are multiplied into the weights by the converter
The gated norm's eps is the model's RMS eps; its groups are d_inner / n_group values. Where transformers
saves names the converter misreads, Case.hf_config gives config.json as published checkpoints spell it."""
from arch_models import COMMON, Case

N_TOKENS, N_CTX = 96, 128
VOCAB = dict(vocab_size=304)
# 8 heads of 16 over 2 groups of B and C with states of 16 (d_inner 128, group norm over 64 values)
MAMBA2 = dict(hidden_size=64, num_heads=8, head_dim=16, expand=2, state_size=16, n_groups=2, conv_kernel=4,
              chunk_size=32, num_hidden_layers=3, tie_word_embeddings=False, layer_norm_epsilon=1e-5, **VOCAB)
GRANITE_MAMBA = dict(mamba_n_heads=8, mamba_d_head=16, mamba_expand=2, mamba_d_state=16, mamba_n_groups=2,
                     mamba_d_conv=4, mamba_chunk_size=32, position_embedding_type=None,
                     embedding_multiplier=3.0, attention_multiplier=0.2, residual_multiplier=0.6, logits_scaling=2.5)
M, A = "linear_attention", "attention"
GRANITE_LAYERS = dict(num_hidden_layers=5, layer_types=[M, A, M, M, A])
# transformers saves "linear_attention" and "full_attention"; the converter counts "attention" layers only
GRANITE_PUBLISHED = dict(layer_types=["mamba", "attention", "mamba", "mamba", "attention"])
NEMOTRON_H = dict(mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4, chunk_size=32,
                  hybrid_override_pattern="M*-M-*M-", tie_word_embeddings=False,
                  mlp_hidden_act="relu2", **VOCAB)
# The converter reads the config through AutoConfig when transformers knows its model_type, and the native
# NemotronHConfig has MoE defaults (num_experts_per_tok: the converter would write nemotron_h_moe); without a
# model_type it reads config.json as published dense Nemotron-H checkpoints have it: the pattern string, no
# MoE keys
NEMOTRON_H_PUBLISHED = dict(model_type=None, hybrid_override_pattern=NEMOTRON_H["hybrid_override_pattern"],
                            mtp_layers_block_type=None, **{k: None for k in (
                                "num_experts_per_tok", "n_routed_experts", "n_shared_experts", "n_group", "topk_group",
                                "moe_intermediate_size", "moe_shared_expert_intermediate_size", "norm_topk_prob",
                                "routed_scaling_factor", "moe_shared_expert_overlap", "moe_latent_size")})
# Nemotron 3 Nano's MoE: the MLP layers are 4 squared-ReLU experts of 32 (2 per token, chosen by sigmoid score
# + a correction bias, weighted by the score renormalized, times 1.7) beside a shared one of 48
NEMOTRON_H_MOE = dict(mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, conv_kernel=4,
                      chunk_size=32, layers_block_type=["mamba", "moe", "attention", "mamba", "moe", "mamba",
                                                        "attention", "moe"],
                      tie_word_embeddings=False, mlp_hidden_act="relu2", n_routed_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=32, moe_shared_expert_intermediate_size=48, n_shared_experts=1,
                      n_group=1, topk_group=1, routed_scaling_factor=1.7, norm_topk_prob=True, **VOCAB)
# every µP multiplier away from 1 (the converter multiplies them into the weights); no gated norm (HF norms
# before the gate when it has one, llama.cpp after: mamba_rms_norm as Falcon-H1 ships)
FALCON_H1 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, max_position_embeddings=256, mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16,
                 mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_chunk_size=32, mamba_rms_norm=False,
                 tie_word_embeddings=False, lm_head_multiplier=0.7, embedding_multiplier=2.0, mlp_multipliers=[0.8, 1.3],
                 key_multiplier=0.9, attention_out_multiplier=1.2, attention_in_multiplier=0.8,
                 ssm_multipliers=[1.1, 0.9, 1.2, 0.8, 1.3], ssm_in_multiplier=1.1, ssm_out_multiplier=0.9, **VOCAB)


def case(arch, model, config, extra, common=True, hf_config=None):
    return Case(arch, model, config, extra, common=common, n_tokens=N_TOKENS, n_ctx=N_CTX, hf_config=hf_config or {})


CASES = {
    "mamba2": case("mamba2", "Mamba2ForCausalLM", "Mamba2Config", MAMBA2, common=False),
    # one group of B and C (Granite 4.0-H's and Mamba2-370M's): the gated norm's weight is [d_inner, 1], which
    # llama-quantize writes as [d_inner]
    "mamba2-1group": case("mamba2", "Mamba2ForCausalLM", "Mamba2Config", dict(MAMBA2, n_groups=1), common=False),
    # Granite 4 (dense): the shared MLP is the FFN
    "granitehybrid": case("granitehybrid", "GraniteMoeHybridForCausalLM", "GraniteMoeHybridConfig",
                          dict(**GRANITE_MAMBA, **GRANITE_LAYERS, **VOCAB, num_local_experts=0, num_experts_per_tok=0,
                               shared_intermediate_size=128, tie_word_embeddings=True), hf_config=GRANITE_PUBLISHED),
    # Granite 4 MoE: 4 experts of 32, 2 per token, beside a shared MLP of 48
    "granitehybrid-moe": case("granitehybrid", "GraniteMoeHybridForCausalLM", "GraniteMoeHybridConfig",
                              dict(**GRANITE_MAMBA, **GRANITE_LAYERS, **VOCAB, num_local_experts=4,
                                   num_experts_per_tok=2, intermediate_size=32, shared_intermediate_size=48,
                                   tie_word_embeddings=False), hf_config=GRANITE_PUBLISHED),
    "nemotron_h": case("nemotron_h", "NemotronHForCausalLM", "NemotronHConfig", NEMOTRON_H, hf_config=NEMOTRON_H_PUBLISHED),
    "nemotron_h_moe": case("nemotron_h_moe", "NemotronHForCausalLM", "NemotronHConfig", NEMOTRON_H_MOE),
    "falcon-h1": case("falcon-h1", "FalconH1ForCausalLM", "FalconH1Config", FALCON_H1, common=False),
}
assert COMMON["hidden_size"] == 64  # the Mamba2 shapes above assume it
