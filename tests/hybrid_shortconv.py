"""Tiny seeded random LFM2 models (short convolutions between attention layers) for the hybrid tests, built
and converted as tests/arch_models.py does. 96 tokens: each convolution window and state is exercised far
past its 3 taps; attention and convolution layers interleave.

What llama.cpp's converter writes for lfm2: attention.head_count_kv per layer (0: a short-convolution
layer), shortconv.l_cache (the taps); per convolution layer shortconv.in_proj [d -> 3d: B, C, x],
shortconv.conv [taps, d], shortconv.out_proj; per attention layer attn_q/k/v/output with attn_q_norm and
attn_k_norm per head; attn_norm (the operator norm) and ffn_norm in every layer; token_embd_norm is the
final norm."""
from arch_models import Case

LAYERS = ["conv", "conv", "full_attention", "conv", "full_attention", "conv"]
LFM2 = dict(num_hidden_layers=6, layer_types=LAYERS, conv_L_cache=3, block_auto_adjust_ff_dim=False,
            tie_word_embeddings=True)

# LFM2-MoE (8B-A1B's shape): the first 2 layers dense, then 4 experts of 32, 2 per token, chosen by sigmoid
# score + expert bias (drawn random here: HF inits it to 0, which would hide it)
LFM2_MOE = dict(LFM2, num_dense_layers=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)

CASES = {
    "lfm2": Case("lfm2", "Lfm2ForCausalLM", "Lfm2Config", LFM2, n_tokens=96, n_ctx=128),
    "lfm2moe": Case("lfm2moe", "Lfm2MoeForCausalLM", "Lfm2MoeConfig", LFM2_MOE, n_tokens=96, n_ctx=128),
}
