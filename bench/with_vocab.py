"""A GGUF file with its tokenizer replaced by a vocab-only GGUF's (llama.cpp's vocab files, ../shared/fixtures/
vocab), padded to the model's vocabulary with unused tokens, and ChatML's two turn markers added as control
tokens where that vocabulary lacks them. bench/hybrid_files.py's random-weight files carry a made-up tokenizer
with no special token; with a real one a chat template's turns tokenize as the published model's do (what
bench/agent_trace.py's turn checkpoints need). The tensors and every other key are copied as they are
(gguf-py's gguf_new_metadata).

    python bench/with_vocab.py MODEL.gguf VOCAB.gguf OUT.gguf"""
import argparse
from pathlib import Path

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

T = gguf.GGUFValueType
MARKERS = ["<|im_start|>", "<|im_end|>"]


def with_vocab(model: Path, vocab: Path, out: Path):
    src, voc = gguf.GGUFReader(model), gguf.GGUFReader(vocab)
    arch = src.fields["general.architecture"].contents()
    n_vocab = next(t.shape[-1] for t in src.tensors if t.name == "token_embd.weight")
    tokens = list(voc.fields["tokenizer.ggml.tokens"].contents())
    types = list(voc.fields["tokenizer.ggml.token_type"].contents())
    for marker in MARKERS:
        if marker not in tokens:
            tokens.append(marker)
            types.append(gguf.TokenType.CONTROL)
    if len(tokens) > n_vocab:
        raise SystemExit(f"{vocab.name} has {len(tokens)} tokens, more than the model's {n_vocab}")
    types += [gguf.TokenType.UNUSED] * (n_vocab - len(tokens))
    tokens += [f"[PAD{i}]" for i in range(len(tokens), n_vocab)]
    new = {"tokenizer.ggml.tokens": MetadataDetails(T.ARRAY, tokens, sub_type=T.STRING),
           "tokenizer.ggml.token_type": MetadataDetails(T.ARRAY, [int(t) for t in types], sub_type=T.INT32)}
    for key, field in voc.fields.items():
        if key.startswith("tokenizer.") and key not in new:
            sub = field.types[-1] if field.types[0] == T.ARRAY else None
            new[key] = MetadataDetails(field.types[0], field.contents(), sub_type=sub)
    new["tokenizer.ggml.eos_token_id"] = MetadataDetails(T.UINT32, tokens.index("<|im_end|>"))
    old = [k for k in src.fields if k.startswith("tokenizer.")]
    copy_with_new_metadata(src, gguf.GGUFWriter(out, arch=arch, endianess=src.endianess), new, old)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path)
    p.add_argument("vocab", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    with_vocab(args.model, args.vocab, args.out)


if __name__ == "__main__":
    main()
