"""Vocabulary from GGUF metadata: tokens, scores, types, merges, special ids, flags, EOG set.

Mirrors what llama.cpp's llama_vocab::load derives from the same keys (defaults per model type,
auto-detected EOT/EOG tokens, per-token attributes). ref: llama.cpp src/llama-vocab.cpp
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# token attributes (bit flags), as llama.cpp's llama_token_attr
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 4, 2, 8, 16, 32, 64
LSTRIP, RSTRIP = 128, 256
# GGUF tokenizer.ggml.token_type value -> attribute
_TYPE_ATTR = {1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 5: UNUSED, 6: BYTE}

SUPPORTED_MODELS = ("llama", "gpt2", "bert", "gemma4")

# model -> (bos, eos, unk, sep, pad, mask) defaults before the metadata overrides them
_DEFAULT_IDS = {
    "llama": (1, 2, 0, None, None, None),
    "bert": (101, None, 100, 102, 0, 103),
    "gpt2": (11, 11, None, None, None, None),
    "gemma4": (None, None, None, None, None, None),
}

_EOT_TEXTS = frozenset(("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                        "<end_of_utterance>"))
_EOG_TEXTS = _EOT_TEXTS | frozenset(("<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>",
                                     "<|eom_id|>", "[EOS]", "<eos>", "<turn|>", "<|tool_response>",
                                     "[e~["))
# fill-in-the-middle tokens: role -> the texts that name it when the metadata's
# tokenizer.ggml.fim_{role}_token_id does not (ref: llama-vocab.cpp, "find FIM_PRE token" and on)
FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
            "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
            "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
            "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
_FIM_LEGACY_KEYS = {"pre": "prefix_token_id", "suf": "suffix_token_id", "mid": "middle_token_id"}
_FIM_EOG = ("pad", "rep", "sep")  # FIM pad / repo / file-separator tokens are end-of-generation too
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


@dataclass
class Vocab:
    model: str                      # tokenizer.ggml.model
    pre: str                        # tokenizer.ggml.pre ("default" when absent)
    tokens: list[str]
    scores: np.ndarray              # float32 [n_vocab]
    token_type: list[int]           # GGUF token types (1 normal .. 6 byte)
    merges: list[str]
    attrs: list[int]                # llama.cpp attribute bit flags per token
    token_to_id: dict[str, int]
    bos_id: int | None = None
    eos_id: int | None = None
    unk_id: int | None = None
    sep_id: int | None = None
    pad_id: int | None = None
    mask_id: int | None = None
    cls_id: int | None = None       # llama.cpp's llama_vocab_cls is the BOS token unless the file names one
    eot_id: int | None = None
    eom_id: int | None = None
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    add_space_prefix: bool = False
    ignore_merges: bool = False
    lowercase: bool = True          # BERT normalizer
    strip_accents: bool = True
    eog_ids: set[int] = field(default_factory=set)
    fim_ids: dict[str, int] = field(default_factory=dict)  # FIM_TEXTS role -> token id, for the roles found

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def _get(md: dict, key: str, default=None):
    return md.get("tokenizer.ggml." + key, default)


def _token_map(tokens: list[str]) -> dict[str, int]:
    """text -> id; llama.cpp keeps the first id of a duplicated text."""
    mapping = dict(zip(tokens, range(len(tokens))))
    if len(mapping) != len(tokens):
        for i in range(len(tokens) - 1, -1, -1):
            mapping[tokens[i]] = i
    return mapping


def _attrs(md: dict, n: int) -> list[int]:
    types = _get(md, "token_type")
    if types is None:
        return [NORMAL] * n
    table = np.zeros(8, dtype=np.int64)  # undefined GGUF types (0, 7) get no attribute
    for gguf_type, attr in _TYPE_ATTR.items():
        table[gguf_type] = attr
    return table[np.clip(np.asarray(types[:n], dtype=np.int64), 0, 7)].tolist()


def _flags_for_model(v: Vocab, md: dict) -> None:
    """Defaults per model/pre type, then the metadata flags (llama_vocab::load order)."""
    if v.model in ("gpt2", "gemma4"):
        v.add_space_prefix = False
        if v.pre in ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "tekken", "chameleon"):
            v.ignore_merges = v.pre != "chameleon"
            v.add_bos = True
    elif v.model == "llama":
        v.add_space_prefix, v.add_bos = True, True
    elif v.model == "bert":
        v.add_bos, v.add_sep = True, True
    v.add_space_prefix = bool(_get(md, "add_space_prefix", v.add_space_prefix))
    v.add_bos = bool(_get(md, "add_bos_token", v.add_bos))
    v.add_eos = bool(_get(md, "add_eos_token", v.add_eos))
    v.add_sep = bool(_get(md, "add_sep_token", v.add_sep))
    if v.model == "gemma4":
        v.add_bos = True  # ref: llama.cpp PR 21500 (Gemma 4 workaround)
    v.lowercase = bool(_get(md, "normalizer.lowercase", True))
    v.strip_accents = bool(_get(md, "normalizer.strip_accents", v.lowercase))


def _special_ids(v: Vocab, md: dict) -> None:
    bos, eos, unk, sep, pad, mask = _DEFAULT_IDS[v.model]
    n = v.n_vocab

    def pick(key: str, default):
        default = default if default is not None and default < n else None
        value = _get(md, key)
        return int(value) if value is not None and 0 <= int(value) < n else default

    v.bos_id, v.eos_id = pick("bos_token_id", bos), pick("eos_token_id", eos)
    v.unk_id, v.sep_id = pick("unknown_token_id", unk), pick("seperator_token_id", sep)
    v.pad_id, v.mask_id = pick("padding_token_id", pad), pick("mask_token_id", mask)
    v.eot_id, v.eom_id = pick("eot_token_id", None), pick("eom_token_id", None)
    v.cls_id = pick("cls_token_id", v.bos_id)


def _mark_control(v: Vocab, tid: int) -> None:
    v.attrs[tid] |= CONTROL


def _fim_ids(v: Vocab, md: dict) -> None:
    """Each FIM role's token: the metadata's id (the legacy prefix/suffix/middle keys last, as llama.cpp
    reads them), else the first of its texts in the vocabulary (marked control)."""
    for role, texts in FIM_TEXTS.items():
        found = None
        for key in (f"fim_{role}_token_id", _FIM_LEGACY_KEYS.get(role)):
            value = _get(md, key) if key else None
            if value is not None and 0 <= int(value) < v.n_vocab:
                found = int(value)
        if found is None:
            found = next((v.token_to_id[t] for t in texts if t in v.token_to_id), None)
            if found is not None:
                _mark_control(v, found)
        if found is not None:
            v.fim_ids[role] = found


def _detect_eog(v: Vocab) -> None:
    """EOT/EOM by text, FIM and EOG tokens by text, as llama.cpp's auto-detection does."""
    t2i = v.token_to_id
    if v.eot_id is None:
        v.eot_id = next((t2i[t] for t in _EOT_TEXTS if t in t2i), None)
        if v.eot_id is not None:
            _mark_control(v, v.eot_id)
    if v.eom_id is None and "<|eom_id|>" in t2i:
        v.eom_id = t2i["<|eom_id|>"]
        _mark_control(v, v.eom_id)
    eog = {v.fim_ids[role] for role in _FIM_EOG if role in v.fim_ids}
    for text in _EOG_TEXTS:
        if text in t2i:
            eog.add(t2i[text])
            _mark_control(v, t2i[text])
    eog.update(i for i in (v.eos_id, v.eot_id, v.eom_id) if i is not None)
    _drop_harmony_end(v, eog)
    v.eog_ids = eog


def _drop_harmony_end(v: Vocab, eog: set[int]) -> None:
    texts = {v.tokens[i]: i for i in eog}
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(texts["<|end|>"])
        v.attrs[texts["<|end|>"]] = USER_DEFINED
    if "<|tool_response>" in texts and "</s>" in texts:
        eog.discard(texts["</s>"])
        v.attrs[texts["</s>"]] = NORMAL


def _per_model_attrs(v: Vocab, md: dict) -> None:
    """Token attributes llama.cpp sets by model name (unused, lstrip/rstrip)."""
    for i in np.flatnonzero(np.asarray(v.attrs) & CONTROL).tolist():
        if "unused" in v.tokens[i]:
            v.attrs[i] |= UNUSED
    for text in _ALWAYS_RENDERED:
        if text in v.token_to_id:
            v.attrs[v.token_to_id[text]] = USER_DEFINED
    name = str(md.get("general.name", "")).lower()
    if v.pre in ("jina-v2-de", "jina-v2-es", "jina-v2-code") and "<mask>" in v.token_to_id:
        v.attrs[v.token_to_id["<mask>"]] |= LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for i in special_ids(v):
            v.attrs[i] |= RSTRIP
        for text, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if text in v.token_to_id:
                i = v.token_to_id[text]
                v.attrs[i] = v.attrs[i] | RSTRIP if on else v.attrs[i] & ~RSTRIP


def special_ids(v: Vocab) -> list[int]:
    """Control, user-defined and unknown tokens, longest text first (llama.cpp's special cache)."""
    mask = CONTROL | USER_DEFINED | UNKNOWN
    ids = np.flatnonzero(np.asarray(v.attrs) & mask).tolist()
    ids.sort(key=lambda i: -len(v.tokens[i]))
    return ids


class VocabError(ValueError):
    """Tokenizer metadata no tokenizer can be built from (wrong types, lengths, unknown models)."""


def load_vocab(md: dict) -> Vocab:
    """The vocabulary of trusted metadata; Tokenizer.from_gguf turns what untrusted metadata makes this raise
    into VocabError."""
    model = md.get("tokenizer.ggml.model")
    if model not in SUPPORTED_MODELS:
        raise ValueError(f"unsupported tokenizer model {model!r} (supported: {', '.join(SUPPORTED_MODELS)})")
    tokens = _get(md, "tokens") or []
    if not tokens:
        raise ValueError("GGUF metadata has no tokenizer.ggml.tokens")
    if "" in tokens:
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
    scores, types = _get(md, "scores"), _get(md, "token_type")
    for key, arr in (("scores", scores), ("token_type", types)):
        if arr is not None and len(arr) < len(tokens):
            raise ValueError(f"tokenizer.ggml.{key} has {len(arr)} entries for {len(tokens)} tokens")
    merges = _get(md, "merges")
    merges = [] if merges is None else list(merges)  # an empty array reads back as a numpy array
    if model in ("gpt2", "gemma4") and not merges:
        raise ValueError(f"tokenizer model {model!r} needs tokenizer.ggml.merges")
    v = Vocab(model=model, pre=str(_get(md, "pre") or "default"), tokens=tokens,
              scores=np.asarray(scores[:len(tokens)], dtype=np.float32) if scores is not None
              else np.zeros(len(tokens), dtype=np.float32),
              token_type=types[:len(tokens)].tolist() if types is not None else [1] * len(tokens),
              merges=merges, attrs=_attrs(md, len(tokens)), token_to_id=_token_map(tokens))
    if model == "gemma4":
        v.pre = "gemma4"
    _flags_for_model(v, md)
    _special_ids(v, md)
    _fim_ids(v, md)
    _detect_eog(v)
    _per_model_attrs(v, md)
    return v
