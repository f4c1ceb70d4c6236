"""Test-only converter: a transformers BertModel / BertForSequenceClassification -> GGUF with F32 tensors,
names and keys from gguf-py (llama.cpp's own package), following llama.cpp's convert_hf_to_gguf.py
BertModel: the `bert.` prefix dropped, HF names mapped by gguf's TensorNameMap; for sequence
classification the pooler dense becomes `cls` and the classifier `cls.output` (pooling type rank)."""
from __future__ import annotations

import os

import gguf
import numpy as np

from llamay.gguf import GGUFWriter

U32, F32 = int(gguf.GGUFValueType.UINT32), int(gguf.GGUFValueType.FLOAT32)

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "fox", "quick", "brown", "runs", "jump", "over", "lazy"]
LETTERS = [chr(c) for c in range(97, 123)]


def bert_vocab(n_vocab: int) -> dict[str, tuple]:
    """A made-up WordPiece vocab in GGUF form ('▁' marks a word start): 5 specials, words, letters."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["\u2581" + w for w in WORDS + LETTERS] + LETTERS
    assert len(tokens) <= n_vocab
    tokens += [f"\u2581[unused{i}]" for i in range(n_vocab - len(tokens))]
    types = [3] * 5 + [1] * (n_vocab - 5)
    return {"tokenizer.ggml.model": ("bert", None), "tokenizer.ggml.tokens": (tokens, None),
            "tokenizer.ggml.token_type": (np.array(types, np.int32), None),
            "tokenizer.ggml.padding_token_id": (0, U32), "tokenizer.ggml.unknown_token_id": (1, U32),
            "tokenizer.ggml.bos_token_id": (2, U32), "tokenizer.ggml.seperator_token_id": (3, U32),
            "tokenizer.ggml.eos_token_id": (3, U32), "tokenizer.ggml.mask_token_id": (4, U32),
            "tokenizer.ggml.add_bos_token": (True, None), "tokenizer.ggml.add_eos_token": (True, None)}


def hparams(cfg, pooling: int) -> dict[str, tuple]:
    K = gguf.Keys
    k = lambda key: key.format(arch="bert")
    return {
        K.General.ARCHITECTURE: ("bert", None),
        k(K.LLM.CONTEXT_LENGTH): (cfg.max_position_embeddings, U32),
        k(K.LLM.EMBEDDING_LENGTH): (cfg.hidden_size, U32),
        k(K.LLM.BLOCK_COUNT): (cfg.num_hidden_layers, U32),
        k(K.LLM.FEED_FORWARD_LENGTH): (cfg.intermediate_size, U32),
        k(K.Attention.HEAD_COUNT): (cfg.num_attention_heads, U32),
        k(K.Attention.LAYERNORM_EPS): (cfg.layer_norm_eps, F32),
        k(K.Attention.CAUSAL): (False, None),
        k(K.LLM.POOLING_TYPE): (pooling, U32),
    }


def tensors(model) -> dict[str, np.ndarray]:
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, model.config.num_hidden_layers)
    classify = hasattr(model, "classifier")
    out = {}
    for name, t in model.state_dict().items():
        name = name.removeprefix("bert.")
        if name.startswith("embeddings.position_ids") or (name.startswith("pooler.") and not classify):
            continue
        w = t.detach().float().numpy().copy()
        if name.startswith("pooler.dense."):
            new = "cls." + name.rsplit(".", 1)[1]
        elif name.startswith("classifier."):
            new = "cls.output." + name.rsplit(".", 1)[1]
        else:
            new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ValueError(f"cannot map tensor {name!r}")
        out[new] = np.ascontiguousarray(w, dtype=np.float32)
    return out


def convert(model, pooling: int) -> tuple[dict[str, tuple], dict[str, np.ndarray]]:
    """pooling: llama.cpp's pooling type id (1 mean, 2 cls, 4 rank)."""
    return {**hparams(model.config, pooling), **bert_vocab(model.config.vocab_size)}, tensors(model)


def write(path: str | os.PathLike, metadata: dict[str, tuple], tensors: dict[str, np.ndarray]):
    w = GGUFWriter()
    for key, (value, vtype) in metadata.items():
        w.add(key, value, vtype=vtype)
    for name, data in tensors.items():
        w.add_tensor(name, data)
    w.write(path)
