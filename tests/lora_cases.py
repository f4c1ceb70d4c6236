"""Tiny seeded LoRA adapters (peft) on tiny base models (arch_models.py), each converted by llama.cpp's own
convert_lora_to_gguf.py, as tests/test_lora.py checks them and scripts/llamacpp_lora_logits.py recorded
llama.cpp's logits with them (tests/fixtures/llamacpp_lora_logits.npz)."""
from __future__ import annotations

from pathlib import Path

import torch

import llamacpp_tree
from arch_models import CASES, convert

# adapter name -> (base case, peft LoraConfig keywords, seed of its weights)
ADAPTERS = {
    "llama-all": ("llama", dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                   "gate_proj", "up_proj", "down_proj"]), 7),
    "llama-attn": ("llama", dict(r=2, lora_alpha=2, target_modules=["q_proj", "v_proj"]), 8),
    # fused q/k/v and gate/up: the adapter's B rows split as the weight's rows do
    "phi3-fused": ("phi3", dict(r=4, lora_alpha=16, target_modules=["qkv_proj", "gate_up_proj", "o_proj",
                                                                     "down_proj"]), 9),
    "qwen2-bias": ("qwen2", dict(r=4, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj"]), 10),
}
BASES = sorted({case for case, _, _ in ADAPTERS.values()})


def build_adapter(name: str, base):
    """base (an arch_models.build model) wrapped by peft with the adapter's seeded random weights (peft
    starts B at zero, which would adapt nothing)."""
    from peft import LoraConfig, get_peft_model
    _, config, seed = ADAPTERS[name]
    model = get_peft_model(base, LoraConfig(lora_dropout=0.0, **config), adapter_name=name)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def files(tmp: Path, cache: Path, build) -> tuple[dict[str, Path], dict[str, Path]]:
    """(base case -> GGUF file, adapter name -> GGUF adapter), all written by llama.cpp's converters."""
    bases = convert({b: (CASES[b], build(CASES[b])) for b in BASES}, tmp, cache)
    adapters = {}
    for name, (base, _, _) in ADAPTERS.items():
        d = tmp / f"{name}-peft"
        build_adapter(name, build(CASES[base])).save_pretrained(d)
        adapters[name] = tmp / f"{name}.gguf"
        # peft saves a named adapter in a folder of its name
        llamacpp_tree.convert_lora(cache, d / name if (d / name).exists() else d, tmp / f"{base}-hf", adapters[name])
    return bases, adapters


def peft_logits(name: str, build, ids, scale: float = 1.0, double: bool = False):
    """transformers + peft with the adapter at that scale (float64 when double)."""
    model = build_adapter(name, build(CASES[ADAPTERS[name][0]]))
    if double:
        model = model.double()
    for module in model.modules():
        if hasattr(module, "scaling") and isinstance(module.scaling, dict) and name in module.scaling:
            module.scaling[name] *= scale
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()
