"""Tiny gated delta-net models (Qwen3.5 dense and MoE, Qwen3-Next) for arch_models' build and convert."""
from arch_models import Case

N_TOKENS, N_CTX = 96, 128
L, A = "linear_attention", "full_attention"
BASE = dict(vocab_size=300, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=256, attn_implementation="eager", rms_norm_eps=1e-6,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, tie_word_embeddings=False,
            pad_token_id=None, bos_token_id=None, eos_token_id=None)
ROPE_35 = dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5, mrope_section=[2, 1, 1],
               mrope_interleaved=True)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)

CASES = {
    "qwen35": Case("qwen35", "Qwen3_5ForCausalLM", "Qwen3_5TextConfig",
                   dict(BASE, num_hidden_layers=8, intermediate_size=128, layer_types=[L, L, L, A] * 2,
                        rope_parameters=ROPE_35), common=False, n_tokens=N_TOKENS, n_ctx=N_CTX),
    "qwen35moe": Case("qwen35moe", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig",
                      dict(BASE, **MOE, num_hidden_layers=4, layer_types=[L, L, L, A], rope_parameters=ROPE_35),
                      common=False, seed=1, n_tokens=N_TOKENS, n_ctx=N_CTX),
    "qwen3next": Case("qwen3next", "Qwen3NextForCausalLM", "Qwen3NextConfig",
                      dict(BASE, **MOE, num_hidden_layers=4, intermediate_size=128, layer_types=[L, L, L, A],
                           norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                           rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
                      common=False, seed=2, n_tokens=N_TOKENS, n_ctx=N_CTX),
}
