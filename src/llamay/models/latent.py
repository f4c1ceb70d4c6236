"""Multi-head latent attention (ref: HF KimiLinearAttention, DeepSeek V2's MLA; llama.cpp's absorbed form,
its kimi-linear graph), absorbed: the pool holds, per token, one head of kv_lora + n_rot values, the
normed latent c then the rotary key, as both keys and values (the values' rotary part is attended to and
dropped). Each query head's non-rotary part goes into the latent space through its attn_k_b matrix
(q_h . k_b_h^T c = (k_b_h q_h) . c), its rotary part is kept; each head's output leaves it through its
attn_v_b matrix. The same attention as the expanded form, with a pool of one head."""
from __future__ import annotations


def build(b, batch, pool, P, L, inp, mm):
    a, h, n = P.attn, P.n_head, inp.shape[0]
    rot = P.head_dim - a.kv_lora
    if a.q_lora:
        q = b.rmsnorm(b.matmul(inp, L.q_a), L.q_a_norm, P.norms.eps)
        q = b.matmul(q, L.q_b)
    else:
        q = mm(inp, L, "q")  # [n, H (nope + rot)]
    kv = b.tensor(n, P.head_dim)  # the pool's one head: c, then the rotary key
    c = b.rmsnorm(b.matmul(inp, L.kv_c), L.kv_a_norm, P.norms.eps)
    b.copy_rows(c, kv, n, a.kv_lora)
    b.copy_rows(b.matmul(inp, L.k_rope), kv, n, rot, out_off=a.kv_lora)
    big_q = b.tensor(n, h * P.head_dim)
    b.head_matmul(q, L.k_b, big_q)
    b.copy_rows(q, big_q, n * h, rot, x_off=a.nope, out_off=a.kv_lora)
    b.kv_write(pool, P.kv_index, kv, kv, batch)
    o = b.attention(big_q, pool, P.kv_index, batch, h, P.scale)
    return b.head_matmul(o, L.v_b, b.tensor(n, h * a.v_dim))
