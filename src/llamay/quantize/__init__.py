"""GGUF quantization as llama-quantize does it (run.py), with llama.cpp's per-tensor type mixes (mix.py)."""
from .mix import FTYPES
from .run import QuantizeError, Result, check_ftype, quantize

__all__ = ["FTYPES", "QuantizeError", "Result", "check_ftype", "quantize"]
