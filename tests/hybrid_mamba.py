"""Tiny seeded random HF models with Mamba (Mamba1) mixers (arch_models.Case; built and converted by
arch_models), recorded by `scripts/llamacpp_arch_logits.py --cases hybrid_mamba` into
tests/fixtures/llamacpp_hybrid_mamba.npz. Vocabularies of 304: llama.cpp's converter pads Mamba vocabularies to
a multiple of 8, so 304 keeps the file's vocabulary the model's. 96 tokens: past the conv window (4) many
times.

What llama.cpp's converter writes (numpy shapes, rows first; the mixer's tensors and math:
src/llamay/models/mixer_mamba.py):
- mamba (Mamba, Falcon-Mamba): ssm.conv_kernel, ssm.inner_size (2 n_embd: the converter asserts it),
  ssm.state_size, ssm.time_step_rank (dt's rank), ssm.dt_b_c_rms (true for Falcon-Mamba: dt, B and C
  RMS-normed without weights), feed_forward_length 0, attention.head_count 0, layer_norm_rms_epsilon. Each
  layer x + mamba(rmsnorm(x)) (attn_norm); no FFN; output_norm, output (or tied)
- jamba: ssm.* as mamba (no dt_b_c_rms: the file's ssm_dt_norm, ssm_b_norm, ssm_c_norm weights are the norms),
  attention.head_count_kv per layer (0: Mamba), head_count, feed_forward_length, expert_count,
  expert_used_count, layer_norm_rms_epsilon. Layer: x + mixer(rmsnorm(x)) (attn_norm; attention without
  RoPE), then x + ffn(rmsnorm(x)) (ffn_norm): the SiLU-gated MLP, or in the layers with ffn_gate_inp experts
  (softmax over all, the chosen k's weights not renormalized); no key says which layers have experts
HF's Falcon-Mamba norms dt, B and C with its own mixer_rms_eps; llama.cpp with the model's RMS eps: the case
sets them equal."""
from arch_models import SPM_SPECIALS, Case

N_TOKENS, N_CTX = 96, 128
# d_inner 128 (expand 2), states of 16, dt of rank 8
MAMBA = dict(hidden_size=64, state_size=16, expand=2, conv_kernel=4, time_step_rank=8, num_hidden_layers=3,
             use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5, tie_word_embeddings=False,
             vocab_size=304)


# 6 layers: Mamba, attention every third from layer 1; 4 experts of 128 (2 per token) every second layer
# from 1, so attention and Mamba layers each come with and without experts
JAMBA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
             attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, num_experts=4,
             num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8,
             mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-6,
             max_position_embeddings=256, tie_word_embeddings=False, vocab_size=304, **SPM_SPECIALS)


def case(arch, model, config, extra):
    return Case(arch, model, config, extra, common=False, n_tokens=N_TOKENS, n_ctx=N_CTX)


CASES = {
    "mamba": case("mamba", "MambaForCausalLM", "MambaConfig", MAMBA),
    "falcon-mamba": case("mamba", "FalconMambaForCausalLM", "FalconMambaConfig", dict(MAMBA, mixer_rms_eps=1e-5)),
    "jamba": case("jamba", "JambaForCausalLM", "JambaConfig", JAMBA),
}
