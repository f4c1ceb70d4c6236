"""LoRA adapters as llama.cpp's convert_lora_to_gguf.py writes them: a GGUF file of general.type "adapter",
adapter.type "lora", adapter.lora.alpha, and for each adapted weight W a pair W.lora_a [k -> r] and
W.lora_b [r -> m]. Applied without merging: W's projection of x plus scale * (x . A^T) . B^T, with scale the
token's scale for that adapter times alpha / r (the scale alone when alpha is 0), as llama.cpp scales it;
every adapter loaded in their name order, each token's scale 0 for adapters its sequence does not use, so
sequences under different adapters share a batch and each row is one fixed sum.

An adapter is checked against its base before use (architecture, every weight it adapts present and of
the shapes the pair multiplies to); what llamay cannot apply (embedding or expert LoRA) is refused."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..gguf import GGUFError, GGUFReader
from ..kernels.matmul import QWeight
from .checks import ModelFileError, UnsupportedModel
from .arch import ArchSpec
from .weights import layer_tensors, row_parts

_PAIR = re.compile(r"(.+)\.lora_([ab])$")
_LAYER = re.compile(r"blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Lora:
    name: str
    path: str
    digest: str  # sha256 of the file
    scale: float  # the default scale (a request may choose another)
    terms: dict  # (layer, Layer field) -> (A, B, alpha, rank)


def parse_adapter_arg(text: str) -> tuple[str, str, float]:
    """'name=file.gguf[:scale]' or 'file.gguf[:scale]' (named after the file) -> (name, path, scale)."""
    name, _, rest = text.partition("=") if "=" in text.split(":", 1)[0] else ("", "", text)
    path, scale = rest, 1.0
    head, sep, tail = rest.rpartition(":")
    if sep:
        try:
            path, scale = head, float(tail)
        except ValueError:
            pass
    if not path:
        raise ValueError(f"--lora {text!r}: give name=file.gguf[:scale]")
    if not np.isfinite(scale):
        raise ValueError(f"--lora {text!r}: the scale must be a finite number")
    stem = path.rsplit("/", 1)[-1].removesuffix(".gguf")
    return name or stem, path, scale


def load_lora(name: str, path: str, scale: float, spec: ArchSpec, base: GGUFReader, digest: str) -> Lora:
    """The adapter's terms for this base (ModelFileError or UnsupportedModel with the reason otherwise)."""
    try:
        r = GGUFReader(path)
    except (GGUFError, OSError) as e:
        raise ModelFileError(f"LoRA {name}: {e}") from None
    meta = r.metadata
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise ModelFileError(f"LoRA {name}: {path} is not a LoRA adapter (general.type {meta.get('general.type')!r}, "
                             f"adapter.type {meta.get('adapter.type')!r})")
    if meta.get("general.architecture") != spec.arch:
        raise ModelFileError(f"LoRA {name}: made for architecture {meta.get('general.architecture')!r}, the model "
                             f"is {spec.arch!r}")
    alpha = meta.get("adapter.lora.alpha", 0.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
        raise ModelFileError(f"LoRA {name}: adapter.lora.alpha must be a number, got {alpha!r}")
    pairs: dict[str, dict] = {}
    for t in r.tensors:
        m = _PAIR.match(t)
        if not m:
            raise ModelFileError(f"LoRA {name}: tensor {t} is not a lora_a / lora_b")
        pairs.setdefault(m.group(1), {})[m.group(2)] = t
    fields = {}  # GGUF name in the base -> (layer, [(Layer field, first row, last row)])
    for il in range(spec.n_layer):
        for field, (gname, _) in layer_tensors(spec, il).items():
            gated_q = field == "q" and spec.layers[il].attn.out_gate  # its rows interleave query and gate
            adaptable = field in ("qkv", "q", "k", "v", "o", "up", "gate", "down") and not gated_q
            fields[f"blk.{il}.{gname}"] = (il, row_parts(spec, il, field) if adaptable else None)
    terms = {}
    for target, ab in sorted(pairs.items()):
        if set(ab) != {"a", "b"}:
            raise ModelFileError(f"LoRA {name}: {target} has lora_{''.join(ab)} without its pair")
        if target not in fields or target not in base.tensors or fields[target][1] is None:
            raise UnsupportedModel(f"LoRA {name}: adapting {target} is not supported"
                                   + ("" if target in base.tensors else " (the base has no such weight)"))
        ta, tb, tw = r.tensors[ab["a"]], r.tensors[ab["b"]], base.tensors[target]
        if len(tw.shape) != 2 or len(ta.shape) != 2 or len(tb.shape) != 2 or ta.shape != (tw.shape[0], ta.shape[1]) or tb.shape != (ta.shape[1], tw.shape[1]):
            raise ModelFileError(f"LoRA {name}: {target} is {list(tw.shape)}, its pair {list(ta.shape)} x "
                                 f"{list(tb.shape)} does not fit it")
        try:
            a, b = QWeight.from_gguf(r, ab["a"]), QWeight.from_gguf(r, ab["b"])
        except ValueError as e:
            raise ModelFileError(f"LoRA {name}: {e}") from None
        il, parts = fields[target]
        for field, lo, hi in parts:
            terms[(il, field)] = (a, b if (lo, hi) == (0, b.m) else b.rows(lo, hi), float(alpha), ta.shape[1])
    return Lora(name, path, digest, scale, terms)


def layer_terms(loras: list[Lora]) -> dict:
    """layer -> Layer field -> [(adapter name, A, B, alpha, rank)] of every adapter, in name order."""
    out: dict = {}
    for lora in sorted(loras, key=lambda x: x.name):
        for (il, field), term in lora.terms.items():
            out.setdefault(il, {}).setdefault(field, []).append((lora.name, *term))
    return out
