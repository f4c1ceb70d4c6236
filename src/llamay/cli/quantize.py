"""Quantize a GGUF file to another type, as llama-quantize does (the same bytes)."""
from __future__ import annotations

from ..kernels.threads import default_threads
from ..quantize import FTYPES, QuantizeError, quantize
from .common import THREADS, CLIError, eprint, input_file, output_file, progress_bar, resolve_model


def add_parser(p):
    p.add_argument("input", help="GGUF file (F32, F16 or BF16 weights) or a stored model name")
    p.add_argument("output", help="GGUF file to write (replaced atomically)")
    p.add_argument("type", help=f"file type: {', '.join(FTYPES)}")
    p.add_argument("-t", "--threads", type=THREADS, default=None, help="threads (default: the physical cores)")
    p.add_argument("--pure", action="store_true", help="every quantized tensor the default type (no mix)")
    p.add_argument("--output-tensor-type", metavar="TYPE", help="type of output.weight")
    p.add_argument("--token-embedding-type", metavar="TYPE", help="type of token_embd.weight")
    p.add_argument("--leave-output-tensor", action="store_true", help="keep output.weight as it is")
    p.add_argument("--allow-requantize", action="store_true", help="quantize tensors that already are")
    p.add_argument("--imatrix", metavar="FILE", help="importance matrix from llama-imatrix (GGUF or .dat)")


def run(args):
    threads = args.threads or default_threads()
    path = resolve_model(args.input)
    output_file(args.output)
    if args.imatrix:
        input_file(args.imatrix, "--imatrix")
    try:
        with progress_bar("quantizing", "bytes") as step:
            res = quantize(path, args.output, args.type, threads=threads, pure=args.pure,
                           output_tensor_type=args.output_tensor_type, token_embedding_type=args.token_embedding_type,
                           leave_output_tensor=args.leave_output_tensor, allow_requantize=args.allow_requantize,
                           imatrix=args.imatrix, progress=step)
    except (QuantizeError, OSError) as e:
        raise CLIError(str(e)) from None
    mix = ", ".join(f"{n} {t}" for t, n in sorted(res.types.items()))
    eprint(f"llamay: wrote {res.path}: {res.n_tensors} tensors ({mix}), {res.bytes_in / 2**20:.1f} MiB -> "
           f"{res.bytes_out / 2**20:.1f} MiB in {res.seconds:.1f} s")
