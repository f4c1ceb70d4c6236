"""/infill's prompt: llama-server's fill-in-the-middle layout over the vocabulary's FIM tokens
(ref: llama.cpp tools/server/server-common.cpp format_prompt_infill; repo-level pattern: arXiv 2409.12186).

    [FIM_REP]myproject\\n ([FIM_SEP]{filename}\\n{text})... [FIM_SEP]filename\\n
    [BOS][FIM_PRE]{input_prefix}{prompt}[FIM_SUF]{input_suffix}[FIM_MID]

Without FIM_REP / FIM_SEP the extra chunks are joined by a plain-text separator instead."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .llamacpp_params import Prompt, mixed_ids

REPO_NAME = "myproject\n"  # llama.cpp's fixed project name
FILE_NAME = "filename\n"  # and the name of the file being filled
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between extra chunks when the vocabulary has no FIM_SEP
REQUIRED = ("pre", "suf", "mid")
ROLE_NAMES = {"pre": "prefix", "suf": "suffix", "mid": "middle"}


@dataclass
class Infill:
    prefix: Prompt  # input_prefix: text or a mix of text and token ids
    suffix: Prompt
    extra: list[tuple[str, str]]  # input_extra as (filename, text)
    prompt: str  # the start of the middle, after the prefix


@dataclass
class FimVocab:
    ids: dict[str, int]  # the vocabulary's FIM tokens by role (pre suf mid rep sep ...)
    encode: Callable[[str, bool], list[int]]  # (text, parse_special) -> ids, no BOS
    bos: int | None  # prepended before FIM_PRE when the vocabulary adds BOS


def missing(ids: dict[str, int]) -> str:
    """llama-server's reason a vocabulary cannot infill ('' when it can)."""
    return "".join(f"{ROLE_NAMES[r]} token is missing. " for r in REQUIRED if r not in ids)


def infill_ids(fill: Infill, vocab: FimVocab, n_batch: int, n_predict: int, n_ctx: int) -> list[int]:
    """The prompt's ids: prefix and suffix cut to share one batch 3:1 (the prefix's end and the suffix's
    start kept), the extra chunks' end filling what the context leaves after a batch and 2 * n_predict."""
    ids, enc = vocab.ids, vocab.encode
    prefix, suffix = (mixed_ids(p, lambda text, _: enc(text, False)) for p in (fill.prefix, fill.suffix))
    prompt = enc(fill.prompt, True)
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    extra = _extra(fill.extra, vocab)
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))
    head = ([vocab.bos] if vocab.bos is not None else []) + [ids["pre"]] + prefix[len(prefix) - n_prefix:] + prompt
    return extra[len(extra) - n_extra:] + head + [ids["suf"]] + suffix[:n_suffix] + [ids["mid"]]


def _extra(chunks: list[tuple[str, str]], vocab: FimVocab) -> list[int]:
    ids, enc = vocab.ids, vocab.encode
    out = [ids["rep"]] + enc(REPO_NAME, False) if "rep" in ids else []
    for filename, text in chunks:
        out += [ids["sep"]] + enc(filename + "\n", False) if "sep" in ids else enc(CHUNK_SEPARATOR, False)
        out += enc(text, False)
    if "sep" in ids:
        out += [ids["sep"]] + enc(FILE_NAME, False)
    return out
