"""Random-weight GGUF files of published dense shapes (Llama 3.2 1B and 3B, Llama 3.1 8B), for timing at the
sizes people run: gguf-py writes the f16 file tensor by tensor (weights N(0, 0.02), norms 1) with the
tokenizer of llama.cpp's vocab-only ggml-vocab-llama-bpe.gguf (Llama 3's), and llama.cpp's llama-quantize
makes each quantized file. A dense model's time does not depend on its weights' values; their text is noise.

    python bench/dense_files.py OUT_DIR --llama-quantize PATH --vocab ggml-vocab-llama-bpe.gguf
                                [--shape llama-3.2-1b ...] [--type Q4_0 --type Q4_K_M ...]"""
import argparse
import subprocess
from pathlib import Path

import gguf
import numpy as np

# name -> (hidden, layers, heads, kv heads, ffn, tied output), as in each model's published config.json
SHAPES = {
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, True),
    "llama-3.2-3b": (3072, 28, 24, 8, 8192, True),
    "llama-3.1-8b": (4096, 32, 32, 8, 14336, False),
}
TYPES = ("Q4_0", "Q4_K_M", "Q8_0")


def _tokenizer(writer: gguf.GGUFWriter, vocab: Path) -> int:
    """Copies the vocab-only file's tokenizer.* fields; returns the vocabulary size."""
    reader = gguf.GGUFReader(vocab)
    n_vocab = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                vals = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                vals = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(field.name, vals)
            if field.name == "tokenizer.ggml.tokens":
                n_vocab = len(vals)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(field.name, bytes(field.parts[-1]).decode())
        else:
            writer.add_key_value(field.name, field.parts[-1].tolist()[0], kind)
    return n_vocab


def write_f16(name: str, path: Path, vocab: Path):
    hidden, layers, heads, kv_heads, ffn, tied = SHAPES[name]
    head_dim = hidden // heads
    w = gguf.GGUFWriter(path, "llama")
    n_vocab = _tokenizer(w, vocab)
    w.add_name(f"{name} (random weights)")
    w.add_context_length(131072)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tensors = [("token_embd.weight", (n_vocab, hidden))]
    for i in range(layers):
        tensors += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.ffn_norm.weight", (hidden,)),
                    (f"blk.{i}.attn_q.weight", (hidden, hidden)),
                    (f"blk.{i}.attn_k.weight", (kv_heads * head_dim, hidden)),
                    (f"blk.{i}.attn_v.weight", (kv_heads * head_dim, hidden)),
                    (f"blk.{i}.attn_output.weight", (hidden, hidden)),
                    (f"blk.{i}.ffn_gate.weight", (ffn, hidden)), (f"blk.{i}.ffn_up.weight", (ffn, hidden)),
                    (f"blk.{i}.ffn_down.weight", (hidden, ffn))]
    tensors.append(("output_norm.weight", (hidden,)))
    if not tied:
        tensors.append(("output.weight", (n_vocab, hidden)))
    for tname, shape in tensors:  # norms f32, matrices f16
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(tname, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(0)
    for tname, shape in tensors:
        if len(shape) == 1:
            w.write_tensor_data(np.ones(shape, np.float32))
            continue
        out = np.empty(shape, np.float16)
        for r in range(0, shape[0], 4096):  # bounded memory for 8B's matrices
            out[r:r + 4096] = rng.standard_normal((min(4096, shape[0] - r), shape[1]), np.float32) * 0.02
        w.write_tensor_data(out)
    w.close()


def build(name: str, out: Path, quantize: str, vocab: Path, qtype: str) -> Path:
    f16, q = out / f"{name}-f16.gguf", out / f"{name}-{qtype}.gguf"
    if q.exists():
        return q
    if not f16.exists():
        write_f16(name, f16, vocab)
    subprocess.run([quantize, str(f16), str(q), qtype], check=True, capture_output=True)
    return q


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--llama-quantize", required=True)
    p.add_argument("--vocab", type=Path, required=True, help="llama.cpp's models/ggml-vocab-llama-bpe.gguf")
    p.add_argument("--shape", action="append", choices=sorted(SHAPES))
    p.add_argument("--type", action="append", choices=TYPES)
    p.add_argument("--keep-f16", action="store_true", help="keep the f16 file (8B's is 16 GB)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.shape or list(SHAPES):
        for qtype in args.type or TYPES:
            print(build(name, args.out, args.llama_quantize, args.vocab, qtype), flush=True)
        if not args.keep_f16:
            (args.out / f"{name}-f16.gguf").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
