"""Tiny seeded random Kimi-Linear models (kimi-linear: Kimi delta attention beside multi-head latent attention)
for arch_models' build and convert, recorded by `scripts/llamacpp_arch_logits.py --cases hybrid_kda` into
tests/fixtures/llamacpp_hybrid_kda.npz. 5 layers: KDA, MLA, KDA, KDA, MLA; layer 0's FFN dense, the others
8 experts (2 a token) beside a shared one. 96 tokens: past the conv window (4) many times.

What llama.cpp's converter writes (numpy shapes, rows first; H heads; the mixer's math:
src/llamay/models/mixer_kda.py, the latent attention's: src/llamay/models/latent.py):
- kimi-linear.attention.head_count_kv per layer (0: KDA), head_count H, key_length kv_lora + rope (the
  absorbed form's one head), key_length_mla nope + rope, value_length_mla, kv_lora_rank,
  rope.dimension_count (qk_rope_head_dim), ssm.conv_kernel, kda.head_dim, expert_count, expert_used_count,
  expert_feed_forward_length, expert_shared_count, leading_dense_block_count, expert_weights_scale,
  expert_gating_func (2: sigmoid), expert_weights_norm, layer_norm_rms_epsilon.
- KDA layers: attn_q, attn_k, attn_v [H dk, d]; ssm_conv1d_q/_k/_v [H dk, 1, K] (taps oldest first);
  ssm_f_a [dk, d], ssm_f_b [H dk, dk]; ssm_beta [H, d]; ssm_a [H] (-exp(A_log)); ssm_dt.bias [H dk];
  ssm_g_a [dk, d], ssm_g_b [H dk, dk]; ssm_norm [dk]; attn_output [d, H dk].
  y: q, k, v = silu(conv(attn_q x)), ...; g = ssm_a[h] softplus(f_b f_a x + dt_bias) per channel;
  beta = sigmoid(ssm_beta x); q, k l2-normed per head (x / sqrt(sum x^2 + 1e-6)), q / sqrt(dk); per
  head S [dk, dv] = diag(exp(g)) S; delta = (v - S^T k) beta; S += k delta^T; y = S^T q; out =
  attn_output (rmsnorm(y) ssm_norm * sigmoid(g_b g_a x)) per head.
- MLA layers: attn_q [H (nope + rope), d] (no q_lora), attn_kv_a_mqa [kv_lora + rope, d], attn_kv_a_norm
  [kv_lora], attn_k_b [H, kv_lora, nope], attn_v_b [H, v, kv_lora], attn_output [d, H v]. No RoPE at all
  (Kimi's MLA is NoPE): K_h = [k_b_h^T c ; k_rope], V_h = v_b_h c with c = rmsnorm(c) kv_a_norm, scale
  1 / sqrt(nope + rope).
- FFN: ffn_gate/up/down (layer 0); ffn_gate_inp [E, d], exp_probs_b.bias [E], ffn_*_exps, ffn_*_shexp:
  sigmoid scores, the k largest of score + bias, weights normed then times expert_weights_scale."""
from arch_models import Case

N_TOKENS, N_CTX = 96, 128
KIMI = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=5, num_attention_heads=4,
            num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, num_experts=8, num_experts_per_token=2, moe_intermediate_size=32, num_shared_experts=1,
            routed_scaling_factor=2.446, first_k_dense_replace=1, moe_renormalize=True, num_expert_group=1,
            topk_group=1, rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=256,
            linear_attn_config=dict(head_dim=16, num_heads=4, short_conv_kernel_size=4, kda_layers=[1, 3, 4],
                                    full_attn_layers=[2, 5]),
            pad_token_id=None, bos_token_id=None, eos_token_id=None)

# As Kimi's published checkpoints are: their config names the router's function, which llama.cpp's converter
# writes as expert_gating_func (transformers does not save it); layer 0's dense MLP is "mlp." (transformers
# saves it under the experts' prefix too). bench/hybrid_files.py's Kimi-Linear shape takes the same.
PUBLISHED = dict(hf_config={"moe_router_activation_func": "sigmoid"},
                 hf_rename={r"layers\.0\.block_sparse_moe\.": "layers.0.mlp."})

CASES = {"kimi-linear": Case("kimi-linear", "KimiLinearForCausalLM", "KimiLinearConfig", KIMI, common=False,
                             n_tokens=N_TOKENS, n_ctx=N_CTX, **PUBLISHED)}

# Not in the state tests: a variant whose queries go through a low-rank pair (q_lora_rank), as DeepSeek's
MORE = {"kimi-linear-qlora": Case("kimi-linear", "KimiLinearForCausalLM", "KimiLinearConfig",
                                  dict(KIMI, q_lora_rank=24), common=False, seed=3, n_tokens=N_TOKENS, n_ctx=N_CTX,
                                  **PUBLISHED)}
