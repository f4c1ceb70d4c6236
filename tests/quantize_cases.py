"""The quantizations checked byte for byte against llama.cpp's llama_model_quantize: tiny seeded models wide
enough for the K-quants (rows of 256), converted by llama.cpp's converter, each quantized to a file type
with options; and with importance matrices that llama.cpp's llama-imatrix computed on these models
(tests/fixtures/imatrix/, GGUF and legacy .dat). Shared by tests/test_quantize_llamacpp.py and
scripts/llamacpp_quantize.py (which recorded llama.cpp's output digests in
tests/fixtures/quantize_llamacpp.json)."""
from __future__ import annotations

from pathlib import Path

import llamacpp_tree
import tiny_tokenizers
from arch_models import CASES, Case, build

# 8 layers: llama.cpp's "more bits" layers (the first and last eighth, every third between) are 0, 3, 6, 7;
# one KV head per 4 heads (the GQA rules); untied output
LLAMA8 = Case("llama", "LlamaForCausalLM", "LlamaConfig", dict(
    CASES["llama"].extra, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=1,
    head_dim=64, num_hidden_layers=8))
# 8 experts (the 8-expert rules) of rows of 256, tied embeddings
QWEN3MOE8 = Case("qwen3moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
    CASES["qwen3moe"].extra, hidden_size=256, intermediate_size=256, moe_intermediate_size=256,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_hidden_layers=2, num_experts=8,
    num_experts_per_tok=2, tie_word_embeddings=True))
MODELS = {"llama8": (LLAMA8, "f32"), "llama8-f16": (LLAMA8, "f16"), "qwen3moe8": (QWEN3MOE8, "f32")}

FTYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11,
             "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18,
             "Q2_K_S": 21, "BF16": 32}  # llama_ftype
GGML_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "Q6_K": 14}  # ggml_type, for the tensor-type options

# (case name, model, file type, options as llamay.quantize's keywords); "model@TYPE": that model's case
# output quantized again
# Q2_K_S needs an importance matrix (llama.cpp refuses it without one, and so does llamay)
QUANTS = [(f"llama8-{t}", "llama8", t, {}) for t in FTYPE_IDS if t != "Q2_K_S"] + [
    (f"llama8-f16-{t}", "llama8-f16", t, {}) for t in ("F16", "BF16", "Q8_0", "Q4_K_M", "Q5_K_S")] + [
    (f"qwen3moe8-{t}", "qwen3moe8", t, {}) for t in ("Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K")] + [
    ("llama8-Q4_K_M-pure", "llama8", "Q4_K_M", dict(pure=True)),
    ("llama8-Q4_K_M-leave-output", "llama8", "Q4_K_M", dict(leave_output_tensor=True)),
    ("llama8-Q5_K_S-tensor-types", "llama8", "Q5_K_S", dict(output_tensor_type="Q8_0", token_embedding_type="Q4_0")),
    ("llama8-Q8_0-to-Q4_K_M", "llama8@Q8_0", "Q4_K_M", dict(allow_requantize=True)),
]


IMATRIX_DIR = Path(__file__).parent / "fixtures" / "imatrix"
IMATRICES = {"llama8.imatrix.gguf": "llama8", "llama8.imatrix.dat": "llama8", "qwen3moe8.imatrix.gguf": "qwen3moe8"}
# (case name, model, file type, imatrix file in IMATRIX_DIR, named relative to it as llama-quantize was
# given it: its name is recorded in the output)
IMATRIX_QUANTS = [(f"llama8-{t}-imatrix", "llama8", t, "llama8.imatrix.gguf")
                  for t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q4_K_S",
                            "Q4_K_M", "Q5_K_M", "Q6_K")] + [
    ("llama8-Q4_K_M-imatrix-dat", "llama8", "Q4_K_M", "llama8.imatrix.dat"),
    ("qwen3moe8-Q4_K_M-imatrix", "qwen3moe8", "Q4_K_M", "qwen3moe8.imatrix.gguf"),
    ("qwen3moe8-Q2_K_S-imatrix", "qwen3moe8", "Q2_K_S", "qwen3moe8.imatrix.gguf"),
]
TEXT = ("The quick brown fox jumps over the lazy dog while the cat sleeps by a warm fire. " * 40)


def inputs(tmp: Path, cache: Path) -> dict[str, Path]:
    """model name -> its GGUF file as llama.cpp's converter writes it."""
    out = {}
    for name, (case, outtype) in MODELS.items():
        d = tmp / f"{name}-hf"
        model = build(case)
        model.save_pretrained(d)
        tiny_tokenizers.save_bpe(d, model.config.vocab_size)
        out[name] = tmp / f"{name}.gguf"
        llamacpp_tree.convert(cache, [(d, out[name])], outtype)
    return out


def params(llama_cpp, ftype: str, opts: dict):
    """llama_model_quantize_params for these options (one thread)."""
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread, p.ftype = 1, FTYPE_IDS[ftype]
    p.pure = opts.get("pure", False)
    p.quantize_output_tensor = not opts.get("leave_output_tensor", False)
    p.allow_requantize = opts.get("allow_requantize", False)
    if "output_tensor_type" in opts:
        p.output_tensor_type = GGML_IDS[opts["output_tensor_type"]]
    if "token_embedding_type" in opts:
        p.token_embedding_type = GGML_IDS[opts["token_embedding_type"]]
    return p
