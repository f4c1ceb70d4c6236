"""GGUF files: read (mmap, metadata, tensor infos), write, the quant type table, numpy dequantization."""
from .dequant import dequantize, dequantize_tensor
from .errors import GGUFError
from .quant_types import BY_NAME, QUANT_TYPES, QuantType
from .reader import GGUFReader, TensorInfo
from .writer import GGUFWriter

__all__ = ["GGUFError", "GGUFReader", "GGUFWriter", "QuantType", "QUANT_TYPES", "BY_NAME", "TensorInfo",
           "dequantize", "dequantize_tensor"]
