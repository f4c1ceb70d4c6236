"""`llamay quantize`: a GGUF file rewritten with each tensor in the type llama.cpp's mix gives it (mix.py),
quantized by ggml's reference functions (kernels/csrc/quantize.c), laid out as llama-quantize lays it out,
so the output is the same bytes as llama-quantize's for the same input and options.

The layout (ref: llama.cpp llama_model_quantize_impl and gguf.cpp): the input's metadata in its order and
encoding, less the split keys, with general.quantization_version = 2 and general.file_type appended;
tensors ordered by block number, then by name (llama_model_loader's weight order); each tensor's
dimensions as ggml_n_dims counts them; data aligned to the file's alignment, zero-padded. Written to a
temp file beside the output and renamed, so a failure leaves no partial file."""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..files import write_atomic
from ..gguf import GGUFError, GGUFReader, dequantize
from ..gguf.quant_types import BY_NAME
from ..gguf.reader import T_STRING
from ..gguf.writer import pack_kv, pack_tensor_info
from .imatrix import ImatrixError
from .imatrix import load as load_imatrix
from .mix import FTYPES, Model, Options, category, layer_of, n_dims, plan

QUANTIZATION_VERSION = 2  # GGML_QNT_VERSION
T_U32 = 4  # GGUF's uint32 value type
DROPPED = ("general.quantization_version", "general.file_type", "split.no", "split.count", "split.tensors.count")
SOURCE_TYPES = frozenset(("F32", "F16", "BF16"))  # what is quantized without --allow-requantize
SLAB_BYTES = 64 << 20  # float32 input rows converted and quantized at a time
HALF = {"F16": "<f2", "BF16": "<u2"}  # sources the row quantizer widens itself
_IQ = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL",
       "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4_MOE")


class QuantizeError(ValueError):
    """A quantization that cannot be done as asked; the message says why (nothing is written)."""


@dataclass(frozen=True)
class Result:
    path: str
    n_tensors: int
    bytes_in: int
    bytes_out: int
    types: dict  # target type -> tensor count
    seconds: float


def check_ftype(ftype: str) -> str:
    name = ftype.upper()
    if name in _IQ:
        raise QuantizeError(f"{ftype}: the i-quants are not offered: choosing their grid points well is a "
                            "search against an importance matrix, and a poor i-quantiser is worse than none "
                            "(use llama-quantize with an imatrix for them)")
    if name not in FTYPES:
        raise QuantizeError(f"unknown type {ftype!r} (choose from {', '.join(FTYPES)})")
    return name


def quantize(src: str | os.PathLike, dst: str | os.PathLike, ftype: str, *, threads: int = 1, pure: bool = False,
             output_tensor_type: str | None = None, token_embedding_type: str | None = None,
             leave_output_tensor: bool = False, allow_requantize: bool = False, imatrix: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> Result:
    """Writes dst; progress(input bytes done, input bytes in all) after each tensor. imatrix: a file of
    llama-imatrix (GGUF or legacy .dat), recorded in the output's metadata by the name given, as
    llama-quantize does. QuantizeError when the options cannot be met (nothing written)."""
    from ..kernels.quantize import quantize_rows
    start = time.perf_counter()
    ftype = check_ftype(ftype)
    for flag, t in (("--output-tensor-type", output_tensor_type), ("--token-embedding-type", token_embedding_type)):
        if t is not None and t.upper() not in BY_NAME:
            raise QuantizeError(f"{flag}: unknown tensor type {t!r}")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise QuantizeError("the output must be another file than the input")
    imat = None
    if imatrix is not None:
        try:
            imat = load_imatrix(imatrix)
        except (ImatrixError, OSError) as e:
            raise QuantizeError(f"--imatrix: {e}") from None
        bad = next((n for n, w in imat.entries.items() if not np.isfinite(w).all()), None)
        if bad is not None:
            raise QuantizeError(f"--imatrix: non-finite values for {bad}")
    try:
        r = GGUFReader(src)
    except GGUFError as e:
        raise QuantizeError(str(e)) from None
    opts = Options(ftype, pure, output_tensor_type and output_tensor_type.upper(),
                   token_embedding_type and token_embedding_type.upper(), leave_output_tensor,
                   has_imatrix=bool(imat and imat.entries))
    names = sorted(r.tensors, key=lambda n: (layer_of(n), n.encode()))
    targets = plan(((n, r.tensors[n].shape, r.tensors[n].qtype.name) for n in names), Model.from_metadata(r.metadata),
                   opts)
    for n in names:
        t, want = r.tensors[n], targets[n]
        if (ftype == "Q2_K_S" and want == "Q2_K" and category(n) not in ("token_embd", "output")
                and _weights(imat, n, t) is None):
            raise QuantizeError(f"Q2_K_S needs an importance matrix for its Q2_K tensors (llama.cpp's rule): "
                                f"none {'given' if imat is None else 'for ' + n}")
        if want != t.qtype.name and t.qtype.name not in SOURCE_TYPES and not allow_requantize:
            raise QuantizeError(f"{n} is already {t.qtype.name}: requantizing loses more than quantizing the "
                                "original once (--allow-requantize to do it anyway)")
        if want != t.qtype.name and t.shape[0] % BY_NAME[want].block_size:
            raise QuantizeError(f"{n}: rows of {t.shape[0]} are not whole {want} blocks")
    sizes = {n: _n_rows(r.tensors[n].shape) * BY_NAME[targets[n]].row_bytes(r.tensors[n].shape[0]) for n in names}
    head = _header(r, FTYPES[ftype][0], names, targets, sizes, _imatrix_keys(imatrix, imat))

    total, done = sum(r.tensors[n].n_bytes for n in names), 0

    def write(f):
        nonlocal done
        f.write(head)
        for n in names:
            convert = targets[n] != r.tensors[n].qtype.name
            _write_tensor(f, r, n, targets[n], threads, quantize_rows, _weights(imat, n, r.tensors[n]) if convert else None)
            f.write(b"\0" * (-sizes[n] % r.alignment))
            done += r.tensors[n].n_bytes
            if progress:
                progress(done, total)
    write_atomic(dst, write)
    types: dict = {}
    for n in names:
        types[targets[n]] = types.get(targets[n], 0) + 1
    return Result(os.fspath(dst), len(names), total, sum(sizes.values()), types, time.perf_counter() - start)


def _n_rows(shape) -> int:
    return int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1


def _imatrix_keys(path, imat) -> list[tuple[str, object]]:
    """What llama-quantize records of an importance matrix (its kv overrides: strings cut to 127 bytes)."""
    if imat is None or not imat.entries:
        return []
    keys = [("quantize.imatrix.file", os.fsencode(path)[:127])]
    if imat.datasets:
        keys.append(("quantize.imatrix.dataset", imat.datasets[0].encode()[:127]))
    keys.append(("quantize.imatrix.entries_count", len(imat.entries)))
    if imat.chunk_count > 0:
        keys.append(("quantize.imatrix.chunks_count", imat.chunk_count))
    return keys


def _weights(imat, name: str, t):
    """The tensor's importance rows [n_expert, n_per_row], None without one; a size that does not match
    is an error (except for the token embeddings, which llama.cpp then quantizes without)."""
    if imat is None or name not in imat.entries:
        return None
    w = imat.entries[name]
    n_expert = t.shape[2] if len(t.shape) > 2 else 1
    if w.size != t.shape[0] * n_expert:
        if category(name) == "token_embd":
            return None
        raise QuantizeError(f"imatrix size {w.size} is different from tensor size {t.shape[0] * n_expert} "
                            f"for {name}")
    return w.reshape(n_expert, t.shape[0])


def _header(r: GGUFReader, ftype_id: int, names, targets, sizes, extra) -> bytes:
    kv = [bytes(r.buffer[a:b]) for k, (a, b) in r.metadata_spans.items()
          if k not in DROPPED and k not in dict(extra)]
    kv += [pack_kv(k, v, T_STRING if isinstance(v, bytes) else T_U32)
           for k, v in (("general.quantization_version", QUANTIZATION_VERSION), ("general.file_type", ftype_id), *extra)]
    out = [b"GGUF", struct.pack("<IQQ", 3, len(names), len(kv)), *kv]
    offset = 0
    for n in names:
        t = r.tensors[n]
        out.append(pack_tensor_info(n, t.shape[:n_dims(t.shape)], BY_NAME[targets[n]].id, offset))
        offset += sizes[n] + (-sizes[n] % r.alignment)
    head = b"".join(out)
    return head + b"\0" * (-len(head) % r.alignment)


def _write_tensor(f, r: GGUFReader, name: str, target: str, threads: int, quantize_rows, weights=None):
    """weights: importance rows [n_expert, n_per_row] (expert e's rows quantize with row e) or None."""
    t = r.tensors[name]
    raw = r.data(name)
    if target == t.qtype.name:
        f.write(memoryview(raw))
        return
    k, rows = t.shape[0], _n_rows(t.shape)
    per_expert = t.shape[1] if len(t.shape) > 1 else 1
    row_bytes = t.qtype.row_bytes(k)
    step = max(1, SLAB_BYTES // (4 * k))
    for lo, hi in ((lo, min(lo + step, (lo // per_expert + 1) * per_expert)) for lo in _starts(rows, per_expert, step)):
        w = {} if weights is None or target in ("F32", "F16", "BF16") else {"imatrix": weights[lo // per_expert]}
        part = raw[lo * row_bytes:hi * row_bytes]
        if t.qtype.name in HALF and target != "F32":  # widened inside the quantizer's threads
            x = part.view(HALF[t.qtype.name]).reshape(hi - lo, k)
        else:
            try:
                x = np.ascontiguousarray(dequantize(part, t.qtype, (k, hi - lo)), "<f4")
            except GGUFError as e:
                raise QuantizeError(f"{name}: {e}") from None
        f.write(memoryview(x if target == "F32" else quantize_rows(x, target, threads, **w)))


def _starts(rows: int, per_expert: int, step: int):
    """First rows of the slabs: at most step rows, none crossing from one expert's rows to the next."""
    for e0 in range(0, rows, per_expert):
        yield from range(e0, min(rows, e0 + per_expert), step)
