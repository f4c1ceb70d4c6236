"""Random-weight GGUF files of published hybrid shapes, for benchmarks where no real file is at hand:
transformers builds the model from the published config (weights drawn N(0, 0.02), norms 1), llama.cpp's
own convert_hf_to_gguf.py writes it as f16 and llama.cpp's llama-quantize makes the Q4_K_M file. They time
like the real files (same shapes, same kernels); their text is noise.

    python bench/hybrid_files.py OUT_DIR --llama-quantize PATH [--shape lfm2-1.2b ...]"""
import argparse
import subprocess
import sys
from pathlib import Path

import torch
import transformers as tf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import arch_models  # noqa: E402
import hybrid_kda  # noqa: E402
import llamacpp_tree  # noqa: E402
import tiny_tokenizers  # noqa: E402
from conftest import CACHE  # noqa: E402

_A, _C = "full_attention", "conv"
SHAPES = {  # name -> (model class, config class, the published config's fields that set the shapes)
    "lfm2-1.2b": ("Lfm2ForCausalLM", "Lfm2Config", dict(
        vocab_size=65536, hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=12288, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0, block_multiple_of=256,
        conv_L_cache=3, max_position_embeddings=128000, norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=True,
        layer_types=[_A if i in (2, 5, 8, 10, 12, 14) else _C for i in range(16)])),
    # Qwen3.5-0.8B's text model as published (24 layers, 3 gated delta-net layers to 1 gated attention layer)
    "qwen35-0.8b": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig", dict(
        vocab_size=248320, hidden_size=1024, num_hidden_layers=24, num_attention_heads=8, num_key_value_heads=2,
        head_dim=256, intermediate_size=3584, linear_num_key_heads=16, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=4,
        max_position_embeddings=262144, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25))),
    # Mamba-370M as published (state-spaces/mamba-370m-hf: 48 Mamba1 layers, no attention)
    "mamba-370m": ("MambaForCausalLM", "MambaConfig", dict(
        vocab_size=50280, hidden_size=1024, num_hidden_layers=48, state_size=16, expand=2, conv_kernel=4,
        time_step_rank=64, use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5, tie_word_embeddings=True)),
    # Mamba-1.4B's shape (state-spaces/mamba-1.4b-hf: 48 Mamba1 layers of width 2048)
    "mamba-1.4b": ("MambaForCausalLM", "MambaConfig", dict(
        vocab_size=50280, hidden_size=2048, num_hidden_layers=48, state_size=16, expand=2, conv_kernel=4,
        time_step_rank=128, use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5, tie_word_embeddings=True)),
    # Mamba2-370M as published (state-spaces/mamba2-370m: 48 Mamba2 layers of 32 heads of 64, states of 128)
    "mamba2-370m": ("Mamba2ForCausalLM", "Mamba2Config", dict(
        vocab_size=50288, hidden_size=1024, num_hidden_layers=48, num_heads=32, head_dim=64, expand=2, n_groups=1,
        state_size=128, conv_kernel=4, chunk_size=256, use_bias=False, use_conv_bias=True, layer_norm_epsilon=1e-5,
        tie_word_embeddings=True)),
    # Jamba Mini 1.6's widths (ai21labs/AI21-Jamba-Mini-1.6's config: 4096 wide, Mamba1 of d_inner 8192, attention
    # every 8th layer from layer 4, experts every 2nd from layer 1, 2 a token) at 8 of its 32 layers and 2 of its
    # 16 experts: a token's work per layer is the published one, the file fits this machine
    "jamba-mini-8l": ("JambaForCausalLM", "JambaConfig", dict(
        vocab_size=65536, hidden_size=4096, intermediate_size=14336, num_hidden_layers=8, num_attention_heads=32,
        num_key_value_heads=8, attn_layer_period=8, attn_layer_offset=4, expert_layer_period=2, expert_layer_offset=1,
        num_experts=2, num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=256,
        mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-6, max_position_embeddings=262144,
        tie_word_embeddings=False), dict(tokenizer=tiny_tokenizers.save_spm)),  # llama.cpp's converter reads SPM
    # Kimi-Linear-48B-A3B's widths (moonshotai/Kimi-Linear-48B-A3B-Instruct's config) at 8 of its 27 layers (KDA
    # then latent attention every fourth, as it has them) and 16 of its 256 experts: a token's work per layer is
    # the published one (8 experts and the shared one), the file fits this machine
    "kimi-linear-8l": ("KimiLinearForCausalLM", "KimiLinearConfig", dict(
        vocab_size=163840, hidden_size=2304, intermediate_size=9216, num_hidden_layers=8, num_attention_heads=32,
        num_key_value_heads=32, kv_lora_rank=512, q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64,
        v_head_dim=128, num_experts=16, num_experts_per_token=8, moe_intermediate_size=1024, num_shared_experts=1,
        routed_scaling_factor=2.446, first_k_dense_replace=1, moe_renormalize=True, num_expert_group=1, topk_group=1,
        rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=1048576,
        linear_attn_config=dict(head_dim=128, num_heads=32, short_conv_kernel_size=4, kda_layers=[1, 2, 3, 5, 6, 7],
                                full_attn_layers=[4, 8])),
        hybrid_kda.PUBLISHED),
}


def build(name: str, out: Path, quantize: str) -> Path:
    model_cls, config_cls, fields, *edits = SHAPES[name]
    hf, f16, q4 = out / f"{name}-hf", out / f"{name}-f16.gguf", out / f"{name}-Q4_K_M.gguf"
    if q4.exists():
        return q4
    torch.manual_seed(0)
    model = getattr(tf, model_cls)(getattr(tf, config_cls)(**fields)).to(torch.bfloat16)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.ones_like(p) if pname.endswith("norm.weight") or "layernorm" in pname else
                    torch.randn_like(p) * 0.02)
    model.save_pretrained(hf)
    edits = edits[0] if edits else {}  # where transformers saves what the published checkpoints spell otherwise
    arch_models.as_published(hf, edits.get("hf_config"), edits.get("hf_rename"))
    edits.get("tokenizer", tiny_tokenizers.save_bpe_pairs)(hf, fields["vocab_size"])
    del model
    llamacpp_tree.convert(CACHE, [(hf, f16)], outtype="f16")
    subprocess.run([quantize, str(f16), str(q4), "Q4_K_M"], check=True, capture_output=True)
    return q4


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--llama-quantize", required=True)
    p.add_argument("--shape", action="append", choices=sorted(SHAPES))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.shape or sorted(SHAPES):
        print(build(name, args.out, args.llama_quantize))


if __name__ == "__main__":
    main()
