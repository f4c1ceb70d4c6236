"""Made-up tokenizers saved beside a tiny HF model, in the files llama.cpp's converter reads: a byte-level BPE
(tokenizer.json, via the `tokenizers` library) and a SentencePiece model (tokenizer.model, built as the
sentencepiece protobuf: no training, so the same bytes every time)."""
from __future__ import annotations

import json
from pathlib import Path


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (the alphabet of every byte-level BPE vocab)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def save_bpe(directory: Path, n_vocab: int):
    """256 bytes, merged letter pairs, <|endoftext|> last (id n_vocab - 1)."""
    _save_bpe(directory, n_vocab, [(chr(97 + i % 26), chr(97 + i // 26)) for i in range(n_vocab - 257)])


def save_bpe_pairs(directory: Path, n_vocab: int):
    """A published model's vocabulary size: 256 bytes, then byte pairs merged in order, then pairs followed
    by a byte, <|endoftext|> last (bench/hybrid_files.py's random-weight files of real shapes)."""
    chars = _byte_chars()
    pairs = [(a, b) for a in chars for b in chars]
    merges = pairs[:n_vocab - 257]
    merges += [(a + b, c) for a, b in pairs for c in chars][:n_vocab - 257 - len(merges)]
    _save_bpe(directory, n_vocab, merges)


def _save_bpe(directory: Path, n_vocab: int, pairs: list[tuple[str, str]]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(_byte_chars() + [a + b for a, b in pairs])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    fast.add_special_tokens({"eos_token": "<|endoftext|>"})
    assert len(fast) == n_vocab, len(fast)
    fast.save_pretrained(directory)


def save_spm(directory: Path, n_vocab: int):
    """Gemma's id order: <pad>, <eos>, <bos>, <unk>, 256 byte pieces, then '▁a', '▁b', ... by score."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = n_vocab
    m.trainer_spec.pad_id, m.trainer_spec.eos_id, m.trainer_spec.bos_id, m.trainer_spec.unk_id = 0, 1, 2, 3
    m.normalizer_spec.add_dummy_prefix = False
    P = pb.ModelProto.SentencePiece
    for text, kind in (("<pad>", P.CONTROL), ("<eos>", P.CONTROL), ("<bos>", P.CONTROL), ("<unk>", P.UNKNOWN)):
        m.pieces.add(piece=text, score=0.0, type=kind)
    for b in range(256):
        m.pieces.add(piece=f"<0x{b:02X}>", score=0.0, type=P.BYTE)
    for i in range(n_vocab - 260):
        text = "\u2581" + chr(97 + i % 26) + ("" if i < 26 else chr(97 + i // 26 - 1))
        m.pieces.add(piece=text, score=-float(i), type=P.NORMAL)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.model").write_bytes(m.SerializeToString())
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>",
         "unk_token": "<unk>",
         "add_bos_token": True, "add_eos_token": False}))


def save_bpe_spm(directory: Path, n_vocab: int):
    """A SentencePiece-style BPE in tokenizer.json (Gemma 4's kind: spaces as '▁', byte fallback, no
    byte-level alphabet): <pad>, <eos>, <bos>, <unk>, 256 byte pieces, '▁', the letters, then '▁a', '▁b', ..."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    letters = [chr(97 + i) for i in range(26)]
    merges = [("\u2581", c) for c in letters * 2][:n_vocab - len(specials) - 256 - 27]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"] + letters + [a + b for a, b in merges]
    assert len(tokens) == n_vocab and len(set(tokens)) == n_vocab, (len(tokens), n_vocab)
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, unk_token="<unk>",
                               byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>")
    fast.save_pretrained(directory)
